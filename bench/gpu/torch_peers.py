# PyTorch eager and torch.compile on the same GPU, fp32 (TF32 off) and TF32 on,
# the zoo's own model definitions, batch sizes from argv. Median of 50 after warm-up.
import sys, time, statistics, torch
sys.path.insert(0, "bench/models")
import zoo_models, zoo_export
specs = {s.name: s for s in zoo_models._full_specs()}
names = sys.argv[1].split(","); batches = [int(b) for b in sys.argv[2].split(",")]
def med_ms(f, n=50):
    for _ in range(10): f()
    torch.cuda.synchronize(); ts = []
    for _ in range(n):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
for name in names:
    spec = specs[name]; torch.manual_seed(0)
    m = spec.build().eval().cuda()
    for b in batches:
        x = zoo_export._make_input(spec, b, torch.Generator().manual_seed(2)).cuda()
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32; torch.backends.cudnn.allow_tf32 = tf32
            with torch.inference_mode():
                eager = med_ms(lambda: m(x))
                try:
                    c = torch.compile(m); comp = med_ms(lambda: c(x))
                except Exception as ex:
                    comp = float("nan"); print("compile failed:", str(ex)[:200])
            print("RESULT %s batch %d tf32=%s eager %.3f ms compile %.3f ms" % (name, b, tf32, eager, comp), flush=True)
            torch._dynamo.reset()
