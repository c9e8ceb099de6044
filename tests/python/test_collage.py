"""The `collage` Python module (python/collage_module.cc), run by ctest with
Debian's /usr/bin/python3 and the built module on PYTHONPATH.

Environment: COLLAGE_SOURCE_DIR (the models), COLLAGE_CLI (the `collage`
executable, for the annotated-model export and optimize's workers).
"""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import collage

MODELS = os.path.join(os.environ["COLLAGE_SOURCE_DIR"], "resources", "models")
DCGAN = os.path.join(MODELS, "dcgan_small.onnx")
RESNET = os.path.join(MODELS, "resnet50_small.onnx")


def zoo_io(name):
    base = os.path.join(MODELS, name)
    return collage.load_tensor(base + ".input_0.pb"), collage.load_tensor(base + ".output_0.pb")


class Fixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = collage.Model(DCGAN)
        cls.input_name = cls.model.inputs[0]["name"]
        cls.plan_path = os.path.join(cls.tmp.name, "native.json")
        collage.Plan.single_backend(cls.model, "native").save(cls.plan_path)
        cls.x, cls.expected = zoo_io("dcgan_small")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def edited_plan(self, edit):
        with open(self.plan_path) as f:
            plan = json.load(f)
        edit(plan)
        path = os.path.join(self.tmp.name, "edited.json")
        with open(path, "w") as f:
            json.dump(plan, f)
        return path


class InspectAndRun(Fixture):
    def test_inspect(self):
        info = collage.inspect(DCGAN)
        self.assertEqual(info["inputs"][0]["name"], self.input_name)
        self.assertEqual(info["inputs"][0]["dtype"], "float32")
        self.assertEqual(tuple(info["inputs"][0]["shape"]), self.x.shape)
        self.assertGreater(info["nodes"], 0)
        self.assertIn("ConvTranspose", info["summary"])

    def test_dynamic_inputs_are_noted_with_their_binding(self):
        bert = os.path.join(MODELS, "bert_small.onnx")
        self.assertEqual(collage.Model(bert).notes,
                         ["input 'input_ids' has dynamic dims [batch]: bound to 1 by default; "
                          "bind them with --input-shape input_ids=batchx16"])
        bound = collage.inspect(bert, {"input_ids": [4, 16]})
        self.assertEqual(bound["notes"],
                         ["input 'input_ids' has dynamic dims [batch]: bound to 4 by --input-shape"])

    def test_run_matches_pytorch_output(self):
        session = collage.Session(DCGAN, self.plan_path)
        outputs = session.run({self.input_name: self.x})
        self.assertEqual(list(outputs), [o["name"] for o in self.model.outputs])
        y = next(iter(outputs.values()))
        np.testing.assert_allclose(y, self.expected, rtol=1e-3, atol=1e-5)
        self.assertGreater(session.latency_ms, 0)
        self.assertGreater(session.peak_bytes, 0)
        [native] = session.placement
        self.assertEqual(native["backend"], "native")
        self.assertEqual(native["nodes"], self.model.nodes)
        self.assertAlmostEqual(native["share"], 1.0)

    def test_outputs_are_not_copied_and_outlive_the_session(self):
        session = collage.Session(self.model, collage.Plan.load(self.plan_path))
        y = session.run({self.input_name: self.x})[self.model.outputs[0]["name"]]
        self.assertFalse(y.flags.owndata)  # a view of the Session's tensor
        del session
        np.testing.assert_allclose(y, self.expected, rtol=1e-3, atol=1e-5)

    def test_non_contiguous_input_gives_the_same_result(self):
        session = collage.Session(DCGAN, self.plan_path)
        strided = np.stack([self.x, np.zeros_like(self.x)], axis=-1)[..., 0]
        self.assertFalse(strided.flags.c_contiguous)
        a = next(iter(session.run({self.input_name: self.x}).values()))
        b = next(iter(session.run({self.input_name: strided}).values()))
        np.testing.assert_array_equal(a, b)

    def test_only_the_outputs_asked_for(self):
        session = collage.Session(DCGAN, self.plan_path)
        name = self.model.outputs[0]["name"]
        self.assertEqual(list(session.run({self.input_name: self.x}, outputs=[name])), [name])
        with self.assertRaisesRegex(collage.Error, "'nope' is not an output"):
            session.run({self.input_name: self.x}, outputs=["nope"])

    def test_threads_sharing_a_session_get_their_own_results(self):
        # run() releases the GIL: runs on one Session from several threads
        # take turns instead of sharing its buffers mid-run. Each thread
        # feeds its own input, so crossed buffers show as wrong outputs.
        import threading
        session = collage.Session(DCGAN, self.plan_path)
        inputs = [self.x * s for s in (1.0, -0.5, 2.0, 0.25)]
        expected = [next(iter(session.run({self.input_name: x}).values())) for x in inputs]
        problems = []

        def worker(i):
            for _ in range(8):
                y = next(iter(session.run({self.input_name: inputs[i]}).values()))
                if not np.array_equal(y, expected[i]):
                    problems.append(f"thread {i}: max diff {np.abs(y - expected[i]).max()}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(problems, [])

    def test_annotated_model_carries_its_plan(self):
        annotated = os.path.join(self.tmp.name, "annotated.onnx")
        subprocess.run([os.environ["COLLAGE_CLI"], "run", DCGAN, "--plan", self.plan_path,
                        "--annotated-onnx", annotated], check=True, capture_output=True)
        plan = collage.Plan.from_annotated_onnx(annotated)
        self.assertEqual(len(plan.groups), self.model.nodes)
        self.assertEqual({g["backend"] for g in plan.groups}, {"native"})
        y = next(iter(collage.Session(annotated).run({self.input_name: self.x}).values()))
        np.testing.assert_allclose(y, self.expected, rtol=1e-3, atol=1e-5)
        with self.assertRaisesRegex(collage.Error, "no Collage placement"):
            collage.Session(DCGAN)  # not annotated


class BadInput(Fixture):
    def test_missing_model_file(self):
        with self.assertRaisesRegex(collage.Error, "no_such_model.onnx"):
            collage.Model("/nonexistent/no_such_model.onnx")
        with self.assertRaises(RuntimeError):  # collage.Error is a RuntimeError
            collage.inspect("/nonexistent/no_such_model.onnx")

    def test_plan_for_another_model_is_refused(self):
        with self.assertRaisesRegex(collage.Error, "was made for a model with sha256"):
            collage.Session(RESNET, self.plan_path)

    def test_plan_from_another_machine_is_refused_unless_accepted(self):
        other = self.edited_plan(lambda p: p["fingerprint"].update(
            cpu_model="Another CPU 9000", cpu_vendor="Elsewhere"))
        with self.assertRaisesRegex(collage.Error, "refused: .*measured on another machine"):
            collage.Session(DCGAN, other)
        session = collage.Session(DCGAN, other, accept_stale_plan=True)
        self.assertTrue(any("another machine" in w for w in session.warnings))

    def test_plan_for_other_backend_versions_is_refused(self):
        other = self.edited_plan(lambda p: p.update(backends=[{"name": "native", "version": "0.0-x"}]))
        with self.assertRaisesRegex(collage.Error, "measured with native 0.0-x"):
            collage.Session(DCGAN, other)

    def test_backend_not_allowed(self):
        with self.assertRaisesRegex(collage.Error, "backend 'native', which is not available"):
            collage.Session(DCGAN, self.plan_path, backends=["onednn"])

    def test_unknown_backend_in_plan(self):
        other = self.edited_plan(lambda p: p["groups"][0].update(backend="cudnn"))
        with self.assertRaisesRegex(collage.Error, "backend 'cudnn'"):
            collage.Session(DCGAN, other)

    def test_wrong_inputs(self):
        session = collage.Session(DCGAN, self.plan_path)
        with self.assertRaisesRegex(collage.Error, "'bogus' is not an input"):
            session.run({self.input_name: self.x, "bogus": self.x})
        with self.assertRaisesRegex(collage.Error, f"input '{self.input_name}' is missing"):
            session.run({})
        with self.assertRaisesRegex(collage.Error, f"input '{self.input_name}' has shape"):
            session.run({self.input_name: np.zeros((2,) + self.x.shape[1:], np.float32)})
        with self.assertRaisesRegex(collage.Error, f"input '{self.input_name}' is float64"):
            session.run({self.input_name: self.x.astype(np.float64)})
        with self.assertRaises(collage.Error):
            session.run({self.input_name: np.array(["a", "b"])})
        # The session still works after refusing bad inputs.
        y = next(iter(session.run({self.input_name: self.x}).values()))
        np.testing.assert_allclose(y, self.expected, rtol=1e-3, atol=1e-5)


class Optimize(Fixture):
    def test_optimize_measures_reports_progress_and_writes_json(self):
        events = []
        out = os.path.join(self.tmp.name, "optimized.json")
        plan = collage.optimize(DCGAN, backends=["native", "openblas"],
                                db=os.path.join(self.tmp.name, "db.sqlite"),
                                progress=events.append, output=out, budget=20)
        self.assertTrue(any(e["stage"] == "measure" and e["total"] > 0 for e in events))
        # The graph-level search runs by default, after the op-level DP.
        stages = [e["stage"] for e in events]
        self.assertIn("graph-level", stages)
        self.assertLess(stages.index("search"), stages.index("graph-level"))
        self.assertGreater(len(plan.groups), 0)
        self.assertEqual(sum(len(g["nodes"]) for g in plan.groups), self.model.nodes)
        self.assertTrue(all(np.isfinite(g["cost_ms"]) and g["cost_ms"] > 0 for g in plan.groups))
        self.assertTrue(np.isfinite(plan.predicted_ms))
        with open(out) as f:
            self.assertEqual(json.load(f)["model"]["sha256"], plan.model_sha256)
        y = next(iter(collage.Session(DCGAN, out).run({self.input_name: self.x}).values()))
        np.testing.assert_allclose(y, self.expected, rtol=1e-3, atol=1e-5)

    def test_op_level_only_skips_the_graph_level_search(self):
        events = []
        collage.optimize(DCGAN, backends=["native", "openblas"],
                         db=os.path.join(self.tmp.name, "db.sqlite"), progress=events.append,
                         graph_level=False)
        self.assertIn("search", [e["stage"] for e in events])
        self.assertNotIn("graph-level", [e["stage"] for e in events])

    def test_an_unknown_precision_is_refused_naming_the_known_ones(self):
        # allow_precision is --allow-precision: "bf16" adds onednn_bf16.
        with self.assertRaisesRegex(collage.Error, "fp8.*bf16"):
            collage.optimize(DCGAN, backends=["native"], db="", allow_precision=["fp8"])

    def test_progress_returning_false_cancels(self):
        with self.assertRaisesRegex(collage.Error, "cancelled"):
            collage.optimize(DCGAN, backends=["native"], db="", progress=lambda e: False)

    def test_progress_exception_reaches_the_caller(self):
        def fail(event):
            raise ValueError("stop here")
        with self.assertRaisesRegex(ValueError, "stop here"):
            collage.optimize(DCGAN, backends=["native"], db="", progress=fail)



class Generate(unittest.TestCase):
    """The runtime's decode loop (docs/decoding.md) on a tiny decoder whose
    greedy ids numpy computed without a cache (make_generate_model.py)."""
    DECODERS = os.path.join(os.environ["COLLAGE_SOURCE_DIR"], "tests", "models", "decoder")

    def test_greedy_ids_match_the_uncached_recompute_and_sampling_is_seeded(self):
        g = collage.Generator(os.path.join(self.DECODERS, "tiny_decoder.onnx"), 16)
        out = g.generate([1, 2, 3], max_new_tokens=10)
        self.assertEqual(out["tokens"], [4, 30, 4, 0, 26, 27, 31, 27, 31, 16])
        self.assertEqual(out["stop"], "max-new-tokens")
        self.assertEqual(len(out["step_ms"]), 9)
        self.assertEqual(g.generate([1, 2, 3], max_new_tokens=10, eos=0)["tokens"], [4, 30, 4, 0])
        a = g.generate([1, 2, 3], max_new_tokens=12, temperature=1.5, seed=3)["tokens"]
        self.assertEqual(g.generate([1, 2, 3], max_new_tokens=12, temperature=1.5, seed=3)["tokens"], a)
        self.assertIn("input_ids=1x1", g.step_bindings)

    def test_a_plan_for_the_step_graph_runs_the_steps(self):
        # Every node on native, for the step graph of a 13-row cache; the
        # Generator and `collage generate --plan` take the rows from the plan.
        path = os.path.join(self.DECODERS, "tiny_decoder.onnx")
        shapes = {b.split("=")[0]: [int(d) for d in b.split("=")[1].split("x")]
                  for b in collage.Generator(path, 13).step_bindings}
        with tempfile.TemporaryDirectory() as tmp:
            plan = os.path.join(tmp, "native.json")
            collage.Plan.single_backend(collage.Model(path, shapes), "native").save(plan)
            g = collage.Generator(path, 0, plan)
            self.assertEqual(g.max_length, 13)
            self.assertEqual(g.generate([1, 2, 3], max_new_tokens=10)["tokens"],
                             [4, 30, 4, 0, 26, 27, 31, 27, 31, 16])
            out = subprocess.run([os.environ["COLLAGE_CLI"], "generate", path, "--prompt-ids", "1,2,3",
                                  "--max-new-tokens", "10", "--plan", plan],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("generated: 4,30,4,0,26,27,31,27,31,16", out.stdout)
            self.assertIn("plan " + plan, out.stdout)
            # Asked for another length, the plan is refused with the bindings to use.
            out = subprocess.run([os.environ["COLLAGE_CLI"], "generate", path, "--prompt-ids", "1,2,3",
                                  "--max-new-tokens", "10", "--plan", plan, "--max-length", "20"],
                                 capture_output=True, text=True)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("20-row cache", out.stderr)
            self.assertIn("--input-shape past_key_values.0.key=1x2x20x8", out.stderr)

    def test_a_prefill_plan_runs_the_prompts_pass(self):
        # As `collage generate --prefill-plan`: a plan made for the prefill
        # graph's bindings runs the prompt; one for other shapes is refused
        # naming its file.
        path = os.path.join(self.DECODERS, "tiny_decoder.onnx")
        shapes = lambda bindings: {b.split("=")[0]: [int(d) for d in b.split("=")[1].split("x")]
                                   for b in bindings}
        g = collage.Generator(path, 16)
        self.assertIn("input_ids=1x3", g.prefill_bindings(3))
        with tempfile.TemporaryDirectory() as tmp:
            plan, step = os.path.join(tmp, "prefill.json"), os.path.join(tmp, "step.json")
            collage.Plan.single_backend(collage.Model(path, shapes(g.prefill_bindings(3))), "native").save(plan)
            collage.Plan.single_backend(collage.Model(path, shapes(g.step_bindings)), "native").save(step)
            out = collage.Generator(path, 16, prefill_plan=plan).generate([1, 2, 3], max_new_tokens=10)
            self.assertEqual(out["tokens"], [4, 30, 4, 0, 26, 27, 31, 27, 31, 16])
            self.assertTrue(out["prefill"].startswith("one pass, plan " + plan + ": "), out["prefill"])
            with self.assertRaisesRegex(collage.Error, "step.json"):
                collage.Generator(path, 16, prefill_plan=step).generate([1, 2, 3], max_new_tokens=10)

    def test_a_merged_decoders_plans_name_the_branches_it_runs(self):
        # A merged decoder (an If on use_cache_branch, docs/decoding.md): its
        # step and prompt graphs are its branches inlined (step_model,
        # prefill_model); plans made for them give ONNX Runtime's ids, as the
        # separate form's plan does on the separate form. Refused, naming the
        # mismatch: the separate form's plan, a plan made with the If kept.
        merged = os.path.join(self.DECODERS, "gpt2_style_tiny_merged.onnx")
        separate = os.path.join(self.DECODERS, "gpt2_style_tiny.onnx")
        with open(os.path.join(self.DECODERS, "gpt2_style_tiny.ort_greedy.txt")) as f:
            lines = dict(line.rstrip("\n").split(": ", 1) for line in f if ": " in line)
        prompt = [int(t) for t in lines["prompt"].split()]
        want = [int(t) for t in lines["generated"].split()][:16]
        rows = len(prompt) + 16
        g = collage.Generator(merged, rows)
        self.assertNotIn("use_cache_branch", [i["name"] for i in g.step_model.inputs])
        self.assertEqual([i["shape"] for i in g.prefill_model(len(prompt)).inputs
                          if i["name"] == "attention_mask"], [(1, len(prompt))])
        with tempfile.TemporaryDirectory() as tmp:
            step, prefill, other, kept = (os.path.join(tmp, n + ".json")
                                          for n in ("step", "prefill", "separate", "if"))
            collage.Plan.single_backend(g.step_model, "native").save(step)
            collage.Plan.single_backend(g.prefill_model(len(prompt)), "native").save(prefill)
            collage.Plan.single_backend(collage.Generator(separate, rows).step_model, "native").save(other)
            out = collage.Generator(merged, 0, step, prefill_plan=prefill).generate(prompt, max_new_tokens=16)
            self.assertEqual(out["tokens"], want)
            self.assertTrue(out["prefill"].startswith("one pass, plan " + prefill + ": "), out["prefill"])
            self.assertEqual(collage.Generator(separate, 0, other).generate(prompt, max_new_tokens=16)["tokens"],
                             want)
            with self.assertRaisesRegex(collage.Error, "separate.json was made for a model with sha256 .*"
                                        "gpt2_style_tiny.onnx"):
                collage.Generator(merged, 0, other)
            # The model imported with the flag unbound: the If kept.
            shapes = {b.split("=")[0]: [int(d) for d in b.split("=")[1].split("x")] for b in g.step_bindings}
            collage.Plan.single_backend(collage.Model(merged, shapes), "native").save(kept)
            with self.assertRaisesRegex(collage.Error, "if.json was made for .*merged.onnx with its input "
                                        "'use_cache_branch' unbound.*--input-value use_cache_branch=true"):
                collage.Generator(merged, 0, kept)
            with self.assertRaisesRegex(collage.Error, "if.json.*--input-value use_cache_branch=false"):
                collage.Generator(merged, rows, prefill_plan=kept)

    def test_text_in_and_out_with_the_models_tokenizer(self):
        tokenizers = os.path.join(os.environ["COLLAGE_SOURCE_DIR"], "tests", "models", "tokenizer")
        g = collage.Generator(os.path.join(self.DECODERS, "llama_style_tiny.onnx"), 32)
        self.assertEqual(g.tokenizer, "")
        with self.assertRaisesRegex(collage.Error, "looked for .*tokenizer.json, .*tokenizer.model"):
            g.encode("Hello")
        g.set_tokenizer(os.path.join(tokenizers, "byte_level.tokenizer.json"))
        # reference_bpe.py's ids (expected_ids.tsv).
        ids = g.encode("Hello world, the cache grows.")
        self.assertEqual(ids, [411, 387, 11, 259, 332, 365, 356, 82, 13])
        self.assertEqual(g.decode(ids), "Hello world, the cache grows.")
        self.assertIsInstance(g.decode(g.generate(ids, max_new_tokens=4)["tokens"]), str)

    def test_errors_name_the_tensor(self):
        with self.assertRaisesRegex(collage.Error, "'hidden_states'"):
            collage.Generator(os.path.join(self.DECODERS, "mha_where_two_layers.onnx"), 8)
        g = collage.Generator(os.path.join(self.DECODERS, "tiny_decoder.onnx"), 4)
        with self.assertRaisesRegex(collage.Error, "longer than the cache"):
            g.generate([1, 2, 3, 4, 5], max_new_tokens=1)

class Pipeline(unittest.TestCase):
    """A graph pipeline (docs/pipeline.md) planned on two one-core devices
    and run in process on a small two-tower model; no timing is checked."""
    MODELS = os.path.join(os.environ["COLLAGE_SOURCE_DIR"], "tests", "models", "pipeline")
    TWO_TOWER = os.path.join(MODELS, "two_tower_small.onnx")
    # One node of each tower pinned apart: two stages, so the run crosses a link.
    PINS = {"img/c1/Conv_2": 0, "txt/fc/Gemm_44": 1}

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def plan(self, **kwargs):
        return collage.plan_pipeline(self.TWO_TOWER, devices="cpu:2", batch=4, micro_batches=[1, 2],
                                     runs=1, **kwargs)

    def test_plan_save_load_and_run_matching_the_whole_model(self):
        p = self.plan(pins=self.PINS)
        self.assertEqual(len(p.stages), 2)
        self.assertEqual([s["devices"] for s in p.stages], [["cpu0"], ["cpu1"]])
        self.assertIn("img/c1/Conv_2", p.stages[0]["nodes"])
        self.assertIn("txt/fc/Gemm_44", p.stages[1]["nodes"])
        self.assertEqual(sum(len(s["nodes"]) for s in p.stages), 34)
        self.assertEqual(p.pins, self.PINS)
        self.assertGreater(p.predicted_samples_per_second, 0)
        path = os.path.join(self.tmp.name, "p.json")
        p.save(path)
        loaded = collage.Pipeline.load(path)
        self.assertEqual(loaded, p)
        self.assertEqual(loaded.stages, p.stages)
        self.assertEqual(json.loads(loaded.to_json()), json.loads(p.to_json()))
        for pipeline in (loaded, path):
            r = collage.run_pipeline(self.TWO_TOWER, pipeline, batch=8)
            self.assertGreater(r["samples_per_second"], 0)
            self.assertGreater(r["median_latency_ms"], 0)
            self.assertEqual(r["micro_batches"], 8 // loaded.micro_batch)
            self.assertEqual([s["devices"] for s in r["stages"]], [["cpu0"], ["cpu1"]])
            for s in r["stages"]:
                self.assertGreaterEqual(s["busy_share"], 0)
            self.assertEqual(list(r["memory"]), ["cpu0", "cpu1"])
            self.assertTrue(r["outputs_match"], r["mismatches"])
            self.assertEqual(r["mismatches"], [])

    def test_a_pipeline_for_another_model_is_refused_naming_it(self):
        path = os.path.join(self.tmp.name, "two_tower.json")
        self.plan(output=path)
        with self.assertRaisesRegex(collage.Error, "two_tower.json.*made for"):
            collage.run_pipeline(os.path.join(self.MODELS, "dlrm_small.onnx"), path)

    def test_bad_devices_and_pins_are_refused_as_the_command_line_refuses_them(self):
        with self.assertRaisesRegex(collage.Error, "expected cpu:N"):
            collage.plan_pipeline(self.TWO_TOWER, devices="tpu:2")
        with self.assertRaisesRegex(collage.Error, "no node named 'nope'"):
            self.plan(pins={"nope": 0})
        with self.assertRaisesRegex(collage.Error, "stage 7 cannot be"):
            self.plan(pins={"img/c1/Conv_2": 7})


if __name__ == "__main__":
    unittest.main()
