"""The peers of bench/run_bench.py: ONNX Runtime (npm onnxruntime-node,
peers/ort_runner.js) and PyTorch eager (peers/torch_runner.py), each a
long-lived process that loads the model once and times runs on request, so
the peers are timed the way Collage's plans are: same input, same threads,
interleaved rounds.
"""

import os
import subprocess

import numpy as np
import onnx

from bench_runners import HERE, log


# --------------------------------------------------------------------------
# Peers: long-lived subprocesses speaking "run" / "output PATH" / "quit"
# --------------------------------------------------------------------------

class Peer:
    def __init__(self, name, argv, env=None, ready_timeout=600):
        self.name = name
        self.error = None
        self.version = ""
        try:
            self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
            line = self._readline()
            if not line.startswith("ready"):
                raise RuntimeError(line or self.p.stderr.read()[-400:])
            self.version = line[len("ready"):].strip()
        except Exception as e:  # noqa: BLE001 - a peer that cannot start is reported, not fatal
            self.error = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
            self.close()

    def _readline(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("exited: " + self.p.stderr.read()[-400:].strip())
        return line.strip()

    def _ask(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self._readline()
        if line.startswith("error"):
            raise RuntimeError(line)
        return line

    def run(self):
        return float(self._ask("run").split()[1])

    def output(self, path):
        self._ask("output " + path)
        return np.fromfile(path, dtype=np.float32)

    def close(self):
        p = getattr(self, "p", None)
        if p and p.poll() is None:
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001
                p.kill()


def start_peers(model, threads, which, ort_optimized=None):
    peers = {}
    if "onnxruntime" in which:
        if not os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node")):
            peers["onnxruntime"] = "bench/node_modules/onnxruntime-node missing: cd bench && npm install --ignore-scripts"
        else:
            argv = ["node", os.path.join(HERE, "peers", "ort_runner.js"), model.onnx, model.input, str(threads)]
            peers["onnxruntime"] = Peer("onnxruntime", argv + ([ort_optimized] if ort_optimized else []))
    if "pytorch" in which and model.torch_name:
        peers["pytorch"] = Peer("pytorch", ["/usr/bin/python3", os.path.join(HERE, "peers", "torch_runner.py"),
                                            model.torch_name, model.input, str(threads)])
    return peers


def ort_node_count(path):
    """Nodes of the graph ONNX Runtime runs after its optimisations (None if it
    saved none): the peer's kernel count, beside the plan's."""
    if not os.path.exists(path):
        return None
    try:
        return len(onnx.load(path, load_external_data=False).graph.node)
    except Exception:  # a graph with contrib ops still loads; anything else: unknown
        return None
