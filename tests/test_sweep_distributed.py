"""A sweep across two `jax.distributed` processes equals the single-process sweep.

Two CPU processes on the loopback interface, each with 2 forced CPU devices and Gloo
CPU collectives, run the same sweep over the 4-device global mesh; every process gets
the whole result. It must equal, bit for bit (arrays, CSV and JSON), the sweep of one
process over 4 forced devices (the same per-device program), and the single-device
sweep of the test process to 1e-13 with the same orders (see `_sweep.py`: XLA compiles
a one-device mesh apart, and a few cells round differently).
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np

import jaxrdp

# 15 (q, sigma) pairs and 240 cells. With chunk_size=8 the 4-device global mesh takes
# one stage-1 chunk of 4 x 8 pairs and two stage-2 chunks of 4 x 32 cells (the last
# one padded); the single device takes 2 and 8 chunks of the same per-device shapes.
KW = dict(
  q=np.geomspace(1e-3, 0.2, 5).tolist(),
  sigma=[0.7, 1.0, 2.0],
  steps=[1, 10, 100, 300, 1000, 3000, 7000, 20000],
  delta=[1e-6, 1e-5],
  orders=[2.0, 3.0, 4.0, 8.0, 16.0, 64.0],
  chunk_size=8,
  progress=False,
)

_WORKER = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import jax

    port, pid, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=pid, coordinator_bind_address=f"127.0.0.1:{port}",
                               initialization_timeout=60)
    assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
    assert jax.local_device_count() == 2, jax.local_devices()
    import jaxrdp

    kw = json.loads(os.environ["SWEEP_KW"])
    res = jaxrdp.sweep(**kw)
    np.savez(os.path.join(out, f"p{pid}.npz"), epsilon=res.epsilon, order=res.order)
    res.to_csv(os.path.join(out, f"p{pid}.csv"))
    res.to_json(os.path.join(out, f"p{pid}.json"))
    # Arguments that differ between the processes are refused before any work.
    try:
      jaxrdp.sweep(**dict(kw, sigma=[1.0 + pid]))
    except ValueError as e:
      assert "different arguments on different processes" in str(e), e
      open(os.path.join(out, f"p{pid}.refused"), "w").close()
    jax.distributed.shutdown()
""")


def _free_loopback_port():
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


_ONE_PROCESS = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import jax, jaxrdp
    assert jax.process_count() == 1 and jax.device_count() == 4, jax.devices()
    out = sys.argv[1]
    res = jaxrdp.sweep(**json.loads(os.environ["SWEEP_KW"]))
    np.savez(os.path.join(out, "one.npz"), epsilon=res.epsilon, order=res.order)
    res.to_csv(os.path.join(out, "one.csv"))
    res.to_json(os.path.join(out, "one.json"))
""")


def _run_two_processes(tmp_path, timeout=120):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(
    os.environ,
    XLA_FLAGS="--xla_force_host_platform_device_count=2",
    JAX_PLATFORMS="cpu",
    SWEEP_KW=json.dumps(KW),
  )
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_ENABLE_X64", None)
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  script = tmp_path / "worker.py"
  script.write_text(_WORKER)
  port = str(_free_loopback_port())
  procs = [
    subprocess.Popen(
      [sys.executable, str(script), port, str(pid), str(tmp_path)],
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for pid in (0, 1)
  ]
  logs = []
  try:
    # The one-process reference, 4 forced devices, runs while the two processes do.
    one = subprocess.run(
      [sys.executable, "-c", _ONE_PROCESS, str(tmp_path)],
      env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4"),
      capture_output=True,
      text=True,
      timeout=timeout,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    for p in procs:
      out, err = p.communicate(timeout=timeout)
      logs.append(err[-3000:])
  finally:
    for p in procs:  # a process left waiting for its peer is ended here
      if p.poll() is None:
        p.kill()
        p.communicate()
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log


def test_two_processes_equal_one(tmp_path):
  _run_two_processes(tmp_path)
  one = np.load(tmp_path / "one.npz")
  single = jaxrdp.sweep(**KW, devices=jax.devices()[:1])
  # The one-process mesh is a real reference: it agrees with the single device.
  np.testing.assert_allclose(one["epsilon"], single.epsilon, rtol=1e-13)
  np.testing.assert_array_equal(one["order"], single.order)
  for pid in (0, 1):  # every process holds the whole result
    got = np.load(tmp_path / f"p{pid}.npz")
    np.testing.assert_array_equal(got["epsilon"], one["epsilon"])
    np.testing.assert_array_equal(got["order"], one["order"])
    assert (tmp_path / f"p{pid}.csv").read_text() == (tmp_path / "one.csv").read_text()
    assert (tmp_path / f"p{pid}.json").read_text() == (tmp_path / "one.json").read_text()
    assert (tmp_path / f"p{pid}.refused").exists()
