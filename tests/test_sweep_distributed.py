"""A sweep across two `jax.distributed` processes equals the single-process sweep.

Two CPU processes on the loopback interface, each with 2 forced CPU devices and Gloo
CPU collectives, run the same sweep over the 4-device global mesh; every process gets
the whole result. The reference is a single-device sweep in the test process.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np

import jax

import jaxrdp

# 15 (q, sigma) pairs and 240 cells. With chunk_size=8 the 4-device global mesh takes
# one stage-1 chunk of 4 x 8 pairs and two stage-2 chunks of 4 x 32 cells (the last
# one padded); the single device takes 2 and 8 chunks of the same per-device shapes.
KW = dict(q=np.geomspace(1e-3, 0.2, 5).tolist(), sigma=[0.7, 1.0, 2.0],
          steps=[1, 10, 100, 300, 1000, 3000, 7000, 20000], delta=[1e-6, 1e-5],
          orders=[2.0, 3.0, 4.0, 8.0, 16.0, 64.0], chunk_size=8, progress=False)

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


def _run_two_processes(tmp_path, timeout=120):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_PLATFORMS="cpu", SWEEP_KW=json.dumps(KW))
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_ENABLE_X64", None)
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  script = tmp_path / "worker.py"
  script.write_text(_WORKER)
  port = str(_free_loopback_port())
  procs = [subprocess.Popen([sys.executable, str(script), port, str(pid), str(tmp_path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for pid in (0, 1)]
  logs = []
  try:
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
  single = jaxrdp.sweep(**KW, devices=jax.devices()[:1])
  for pid in (0, 1):  # every process holds the whole result
    got = np.load(tmp_path / f"p{pid}.npz")
    np.testing.assert_array_equal(got["epsilon"], single.epsilon)
    np.testing.assert_array_equal(got["order"], single.order)
    assert (tmp_path / f"p{pid}.csv").read_text() == single.to_csv()
    assert (tmp_path / f"p{pid}.json").read_text() == single.to_json() + "\n"
    assert (tmp_path / f"p{pid}.refused").exists()
