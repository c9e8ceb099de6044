# Runs bench/models/export_zoo.py on a newer torch (2.9+, whose default
# exporter is the dynamo one) with the TorchScript exporter the zoo was made with.
import runpy, sys, torch
sys.path.insert(0, "bench/models")
orig = torch.onnx.export
def export(*a, **k):
    try:
        return orig(*a, dynamo=False, **k)
    except TypeError:
        return orig(*a, **k)
torch.onnx.export = export
sys.argv = ["export_zoo.py"] + sys.argv[1:]
runpy.run_path("bench/models/export_zoo.py", run_name="__main__")
