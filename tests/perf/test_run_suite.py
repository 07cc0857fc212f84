#!/usr/bin/python3
"""The performance suite's own handling of its runs (perf/run_suite.py): logs
with a terminal's colour codes, a fresh tree without the dataset, runs that
cannot happen. The benchmarks are stand-in scripts that print a recorded log:
no timing here.

    test_run_suite.py PERF_DIR   (the repository's perf/)
"""
import contextlib
import io
import json
import os
import stat
import sys
import tempfile
import unittest

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(DATA, "..", "..", "..", "perf"))
import run_suite  # noqa: E402

# kdp_bench_models' output as a terminal got it (TERM=xterm): Google
# Benchmark's colour codes, one of them in front of the "backend:" line.
COLOURED = os.path.join(DATA, "models_coloured.log")


def write_program(path, body):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class Suite(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.build = os.path.join(self.dir.name, "build")
        self.out = os.path.join(self.dir.name, "out")
        self.data = os.path.join(self.dir.name, "data", "fashion-mnist.h5")
        self.saved = run_suite.DATA
        run_suite.DATA = self.data

    def tearDown(self):
        run_suite.DATA = self.saved
        self.dir.cleanup()

    def run_main(self, *args):
        argv = ["run_suite.py", "--build", self.build, "--out", self.out, *args]
        saved, sys.argv = sys.argv, argv
        try:
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                status = run_suite.main()
        finally:
            sys.argv = saved
        with open(os.path.join(self.out, "results.json")) as f:
            return status, json.load(f), printed.getvalue()

    def test_a_coloured_log_reads_as_a_plain_one(self):
        with open(COLOURED) as f:
            raw = f.read()
        self.assertIn("\x1b[", raw)
        # Read as it is, the colour code hides the backend from the suite.
        self.assertEqual(run_suite.this_machine({"models_1x1": raw})["backend"], "unknown")
        text = run_suite.uncoloured(raw)
        self.assertNotIn("\x1b", text)
        self.assertEqual(run_suite.this_machine({"models_1x1": text})["backend"], "Serial")
        # The attention benchmark's line goes on after the backend's name.
        attention = {"attention": "backend: Serial, 1 BLAS thread(s)\n"}
        self.assertEqual(run_suite.this_machine(attention)["backend"], "Serial")
        metrics, models = {}, {}
        run_suite.parse("models_1x1", text, metrics, models)
        # The log's own lines: "MODEL M step 10506.5 us, ... 139.3 % of the roofline".
        self.assertAlmostEqual(metrics["model_M_roofline_1x1"]["value"], 1.393)
        self.assertAlmostEqual(models["T"]["1x1"]["step_us"], 89.4)
        self.assertAlmostEqual(metrics["m_bf16_vs_fp32_step_at_1x1"]["value"], 2.286)

    def test_a_run_from_a_terminal_is_compared_with_its_machine_kind(self):
        write_program(os.path.join(self.build, "perf", "kdp_bench_models"), f"cat '{COLOURED}'")
        baseline = os.path.join(self.dir.name, "baseline.json")
        status, result, printed = self.run_main("--only", "^models_1x1$", "--baseline", baseline)
        self.assertEqual(result["machine"]["backend"], "Serial", printed)
        self.assertEqual(result["failures"], [])
        self.assertIn("model_M_roofline_1x1", result["metrics"])
        self.assertEqual(status, 0, printed)

    def test_a_fresh_tree_imports_the_data_before_the_runs_that_read_it(self):
        runs = run_suite.with_data(run_suite.benchmarks(self.build, False), self.build)
        names = [name for name, _, _ in runs]
        self.assertEqual(names[0], "import_fashion_mnist")
        self.assertIn(self.data, runs[0][1])
        readers = [name for name, cmd, _ in runs if run_suite.needs_data(cmd)]
        self.assertIn("tta_kdp_seed0", readers)
        # Once the data is there, nothing imports it again.
        os.makedirs(os.path.dirname(self.data))
        open(self.data, "w").close()
        again = run_suite.with_data(run_suite.benchmarks(self.build, False), self.build)
        self.assertNotIn("import_fashion_mnist", [name for name, _, _ in again])

    def test_the_import_runs_first_and_the_reader_finds_its_data(self):
        write_program(os.path.join(self.build, "tools", "kdp-data"), 'echo imported > "$3"')
        # kdp-train's epoch lines, from a file the import must have made.
        write_program(os.path.join(self.build, "tools", "kdp-train"),
                      'test -s "$2" || exit 9\n'
                      'echo "epoch 1 val_acc 0.8900 (50000.0 samples/s, 1.5 s)"')
        status, result, printed = self.run_main("--only", "^tta_kdp_seed0$")
        self.assertTrue(os.path.exists(self.data))
        self.assertEqual(list(result["wall_s"]), ["import_fashion_mnist", "tta_kdp_seed0"], printed)
        self.assertEqual(result["metrics"]["time_to_88_kdp_s"]["value"], 1.5)
        self.assertEqual(result["failures"], [])

    def test_a_run_that_cannot_happen_fails_the_suite(self):
        # No build at all: the benchmark is not there.
        status, result, printed = self.run_main("--only", "^linear$")
        self.assertEqual(status, 1)
        self.assertEqual(len(result["failures"]), 1)
        self.assertIn("kdp_bench_linear is not built", result["failures"][0])
        self.assertIn("FAILURES", printed)

    def test_a_failed_import_fails_the_runs_that_need_the_data(self):
        write_program(os.path.join(self.build, "tools", "kdp-data"), "exit 4")
        write_program(os.path.join(self.build, "tools", "kdp-train"), "exit 0")
        status, result, _ = self.run_main("--only", "^tta_kdp_seed0$")
        self.assertEqual(status, 1)
        self.assertTrue(any("import_fashion_mnist exited with 4" in f for f in result["failures"]))
        self.assertTrue(any(f.startswith("tta_kdp_seed0 not run") for f in result["failures"]))

    def peer_that_fails(self, times):
        """A stand-in peer interpreter that exits 1 its first `times` calls."""
        python = os.path.join(self.dir.name, "python")
        count = os.path.join(self.dir.name, "calls")
        write_program(python, f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n'
                              f'[ "$n" -ge {times} ] || exit 1\n'
                              'echo \'{"layout": "1x1", "processes": 1, "threads": 1, "models": {}}\'')
        return python, count

    def test_a_peer_that_fails_once_runs_again(self):
        python, count = self.peer_that_fails(1)
        status, result, printed = self.run_main("--only", "^peer_torch_1x1_0_mlp$", "--peer-python", python)
        self.assertEqual(result["failures"], [], printed)
        self.assertEqual(result["retried"], ["peer_torch_1x1_0_mlp (exit 1 the first time)"])
        self.assertEqual(open(count).read().strip(), "2")

    def test_a_peer_that_fails_twice_fails_the_suite(self):
        python, count = self.peer_that_fails(2)
        status, result, _ = self.run_main("--only", "^peer_torch_1x1_0_mlp$", "--peer-python", python)
        self.assertEqual(status, 1)
        self.assertEqual(result["failures"], ["peer_torch_1x1_0_mlp exited with 1"])
        self.assertEqual(open(count).read().strip(), "2")

    def test_a_machine_limit_is_reported_without_failing(self):
        why = run_suite.runnable(run_suite.NotHere("no emulated cluster on this machine"), self.build)
        self.assertIsInstance(why, run_suite.NotHere)
        self.assertIsInstance(run_suite.runnable(None, self.build), run_suite.CannotRun)

    def test_only_takes_several_patterns_and_lists_the_runs(self):
        self.assertEqual(self.listed("--only", "^linear$", "^checkpoint$"), ["linear", "checkpoint"])

    def test_attention_is_put_beside_pytorchs_sdpa_shape_by_shape(self):
        logs = {"attention": "backend: Serial, 1 BLAS thread(s)\n"
                             "ATTENTION kdp T=256 full fp32 fwd+bwd 10.000 ms\n"
                             "ATTENTION kdp T=256 full bf16 fwd+bwd 4.000 ms\n"
                             "ATTENTION kdp T=256 causal fp32 fwd+bwd 4.000 ms\n"
                             "MEMORY attention peak T=2048 / T=1024 1.010 (target <= 1.15)\n"
                             "MEMORY attention bf16 peak T=2048 / T=1024 1.100 (target <= 1.15)\n",
                "attention_torch": "ATTENTION torch T=256 full fp32 fwd+bwd 15.000 ms\n"
                                   "ATTENTION torch T=256 full bf16 fwd+bwd 8.000 ms\n"
                                   "ATTENTION torch T=256 causal fp32 fwd+bwd 5.000 ms\n"
                                   "ATTENTION torch T=1024 full fp32 fwd+bwd 99.000 ms\n"}
        metrics = {}
        run_suite.attention_ratios(logs, metrics)
        run_suite.parse("attention", logs["attention"], metrics, {})
        target = run_suite.ATTENTION_TARGET
        self.assertEqual(metrics["kdp_vs_torch_attention_T256_full_fp32"],
                         {"value": 1.5, "target": target, "better": "higher"})
        # bf16 against bf16, and each side at its better precision: 8 / 4.
        self.assertEqual(metrics["kdp_vs_torch_attention_T256_full_bf16"],
                         {"value": 2.0, "target": target, "better": "higher"})
        self.assertEqual(metrics["kdp_vs_torch_best_attention_T256_full"],
                         {"value": 2.0, "target": target, "better": "higher"})
        self.assertAlmostEqual(metrics["kdp_vs_torch_attention_T256_causal_fp32"]["value"], 1.25)
        # A side missing: no ratio.
        self.assertNotIn("kdp_vs_torch_attention_T1024_full_fp32", metrics)
        self.assertNotIn("kdp_vs_torch_attention_T256_causal_bf16", metrics)
        self.assertNotIn("kdp_vs_torch_best_attention_T256_causal", metrics)
        self.assertEqual(metrics["attention_peak_memory_T2048_vs_T1024"],
                         {"value": 1.01, "target": 1.15, "better": "lower"})
        self.assertEqual(metrics["attention_bf16_peak_memory_T2048_vs_T1024"],
                         {"value": 1.1, "target": 1.15, "better": "lower"})

    def listed(self, *args):
        argv = ["run_suite.py", "--build", self.build, *args, "--list"]
        saved, sys.argv = sys.argv, argv
        try:
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                self.assertEqual(run_suite.main(), 0)
        finally:
            sys.argv = saved
        return [line.split()[0] for line in printed.getvalue().splitlines()]

    def test_the_mlps_time_to_88_is_each_sides_median_over_its_seeds(self):
        tta = {}
        # kdp-train's epoch lines: seed 0 reaches 88 % after 1.0 + 2.0 s, seed 1
        # never does, seed 2 at once.
        for text in ("epoch 1 val_acc 0.8500 (1.0 samples/s, 1.0 s)\n"
                     "epoch 2 val_acc 0.8810 (1.0 samples/s, 2.0 s)\n",
                     "epoch 1 val_acc 0.8500 (1.0 samples/s, 1.0 s)\n",
                     "epoch 1 val_acc 0.8900 (1.0 samples/s, 0.5 s)\n"):
            run_suite.parse_tta(f"tta_kdp_seed{len(tta.get('kdp', []))}", text, tta)
        for seconds in (4.0, 6.0, None, 5.0):
            run_suite.parse_tta("tta_torch_seed0", json.dumps({"seconds_to_target": seconds}) + "\n", tta)
        self.assertEqual(tta["kdp"], [3.0, None, 0.5])
        # The seed that never reached 88 % is the slowest: kdp's median is 3.0,
        # PyTorch's the mean of its two middle seeds (5.0 and 6.0).
        self.assertEqual(run_suite.median_time(tta["kdp"]), 3.0)
        self.assertEqual(run_suite.median_time(tta["torch"]), 5.5)
        self.assertIsNone(run_suite.median_time([None, None, 1.0]))
        self.assertIsNone(run_suite.median_time([]))

    def test_the_report_names_the_runs_length_and_its_longest_runs(self):
        wall = {"ops": 78.0, "linear": 19.0, "tta_cnn_kdp": 100.0, "loader": 4.8}
        line = run_suite.time_spent(wall, 1500.0, longest=2)
        self.assertEqual(line, "The run took 25.0 min; the longest runs: tta_cnn_kdp 1.7 min, ops 1.3 min.")
        self.assertIn("loader 0.1 min.", run_suite.time_spent(wall, 1500.0))

    def test_the_report_names_the_runs_the_host_moved_apart(self):
        trips = {"linear": [55.0, 60.0], "ops": [58.0, 330.0], "loader": [340.0, 52.0],
                 "attention": [None, 60.0]}
        self.assertEqual(run_suite.moved_runs(trips), ["ops", "loader"])
        note = run_suite.placement_note(trips)
        self.assertIn("during 2 run(s)", note)
        self.assertTrue(note.endswith(": ops, loader."), note)
        self.assertEqual(run_suite.placement_note({"linear": [55.0, 100.0]}), "")

    def test_the_report_names_the_runs_with_the_cpus_apart_throughout(self):
        trips = {"linear": [55.0, 60.0], "models_1x2": [586.0, 337.0], "ops": [58.0, 330.0],
                 "loader": [None, 400.0]}
        self.assertEqual(run_suite.far_runs(trips), ["models_1x2"])
        note = run_suite.placement_note(trips)
        self.assertIn("during 1 run(s)", note)
        self.assertTrue(note.endswith("apart throughout 1 run(s) (a round trip more than 2x the run's "
                                      "fastest), whose figures of two threads or ranks may be their slower "
                                      "placement's: models_1x2."), note)
        # A host that never moves them: nothing is far, however slow its round trip.
        self.assertEqual(run_suite.far_runs({"linear": [300.0, 310.0], "ops": [320.0, 305.0]}), [])
        self.assertEqual(run_suite.far_runs({}), [])

    def test_the_vits_time_to_88_puts_each_side_at_its_best(self):
        vit, versions = {}, {}
        # kdp-train's epoch lines: 88 % (not the CNN's 91 %) is reached at epoch 2.
        kdp = "epoch 1 val_acc 0.8610 (900.0 samples/s, 70.0 s)\nepoch 2 val_acc 0.8850 (910.0 samples/s, 66.0 s)\n"
        run_suite.parse_cnn_tta("tta_vit_kdp", kdp, 150.0, vit, versions, target=run_suite.TTA_TARGET)
        run_suite.parse_cnn_tta("tta_vit_kdp_bf16", "epoch 1 val_acc 0.8700 (1.0 samples/s, 1.0 s)\n", 90.0,
                                vit, versions, target=run_suite.TTA_TARGET)
        for side, wall, accuracies in (("torch", 400.0, [0.85, 0.87, 0.881]), ("torch_bf16", 300.0, [0.86, 0.89])):
            report = {"epochs": [{"test_accuracy": a} for a in accuracies], "torch": "2.15.0"}
            run_suite.parse_cnn_tta(f"tta_vit_{side}", json.dumps(report) + "\n", wall, vit, versions,
                                    target=run_suite.TTA_TARGET)
        self.assertEqual((vit["kdp"]["epochs"], vit["kdp"]["wall_s"]), (2, 150.0))
        self.assertIsNone(vit["kdp_bf16"]["wall_s"])  # never reached: not kdp's best
        self.assertEqual((vit["torch"]["epochs"], vit["torch_bf16"]["epochs"]), (3, 2))
        self.assertEqual(versions["torch"], "2.15.0")
        metrics = {}
        run_suite.vit_tta_metrics(vit, metrics)
        ratio = metrics["kdp_vs_torch_best_time_to_88_vit_2x1"]
        self.assertAlmostEqual(ratio["value"], 150.0 / 300.0)  # against PyTorch's faster, bf16 run
        self.assertEqual((ratio["target"], ratio["better"]), (0.7, "lower"))
        self.assertTrue(all(name in run_suite.EXTRA for name in run_suite.LONG_RUN_TIMEOUT_S))

    def test_bf16_units_are_read_from_the_cpus_flags(self):
        cases = (("flags\t\t: fpu avx2 fma avx512f avx512_bf16\n", True),   # AMD Zen 4, Intel
                 ("flags\t\t: fpu avx2 fma amx_bf16 amx_tile\n", True),
                 ("flags\t\t: fpu sse4_2 avx avx2 fma\n", False),           # AMD Zen 3: emulated
                 ("Features\t: fp asimd bf16 i8mm\n", True),                 # Arm with BF16
                 ("Features\t: fp asimd crc32\n", False),
                 ("processor\t: 0\n", True))                                # the kernel does not say
        for text, expected in cases:
            path = os.path.join(self.dir.name, "cpuinfo")
            with open(path, "w") as f:
                f.write(text)
            self.assertEqual(run_suite.baselines.bf16_units(path), expected, text)

    def test_a_cpu_without_bf16_units_times_the_fp32_peers_instead(self):
        saved = run_suite.baselines.bf16_units
        try:
            run_suite.baselines.bf16_units = lambda: False
            full = self.listed()
            run_suite.baselines.bf16_units = lambda: True
            with_units = self.listed()
        finally:
            run_suite.baselines.bf16_units = saved
        emulated = [n for n in with_units if run_suite.emulated_bf16_run(n)]
        # PyTorch's bf16 steps and every run to 91 % in bf16, where bf16 units exist.
        self.assertIn("tta_cnn_torch_bf16", emulated)
        self.assertTrue(any(n.startswith("peer_torch_1x1_") and n.endswith("_cnn_bf16") for n in emulated))
        for name in emulated:
            self.assertNotIn(name, full)
        for name in run_suite.FP32_PEERS_TO_91:
            self.assertIn(name, full)
            self.assertNotIn(name, with_units)
        # kdp's own bf16 steps (its models' benchmark) still run: they are its figures.
        self.assertIn("reproducible_step_bf16_r2", full)

    def test_best_against_best_takes_pytorchs_fp32_where_its_bf16_did_not_run(self):
        peers = {"kdp": {"1x1": {"M": 100.0}, "2x1": {"M": 150.0}}, "kdp_bf16": {"1x1": {"M": 120.0}},
                 "torch": {"1x1": {"M": 80.0}, "2x1": {"M": 90.0}}}
        metrics = {}
        run_suite.best_peer_metrics(peers, metrics)
        self.assertAlmostEqual(metrics["kdp_vs_torch_best_M_1x1"]["value"], 120.0 / 80.0)
        self.assertNotIn("kdp_vs_torch_best_M_2x1", metrics)  # no bf16 run is timed there
        # Where PyTorch's bf16 ran, the faster of its two precisions.
        peers["torch_bf16"] = {"1x1": {"M": 96.0}}
        run_suite.best_peer_metrics(peers, metrics)
        self.assertAlmostEqual(metrics["kdp_vs_torch_best_M_1x1"]["value"], 120.0 / 96.0)

    def test_the_cnns_time_to_91_puts_each_side_at_its_best(self):
        metrics = {}
        # A CPU without bf16 units: fp32 runs only, kdp's bf16 not timed.
        run_suite.cnn_tta_metrics({"kdp": {"wall_s": 60.0}, "torch": {"wall_s": 150.0},
                                   "lightning": {"wall_s": 120.0}}, metrics)
        self.assertAlmostEqual(metrics["kdp_vs_torch_best_time_to_91_cnn"]["value"], 0.4)
        self.assertAlmostEqual(metrics["kdp_vs_lightning_best_time_to_91_cnn"]["value"], 0.5)
        self.assertEqual(metrics["kdp_vs_torch_best_time_to_91_cnn"]["target"], 0.7)
        self.assertAlmostEqual(metrics["kdp_vs_torch_time_to_91_cnn"]["value"], 0.4)
        # With bf16 units: the faster precision of each side; a run that never
        # reached 91 % does not count.
        metrics = {}
        run_suite.cnn_tta_metrics({"kdp": {"wall_s": 90.0}, "kdp_bf16": {"wall_s": 60.0},
                                   "torch_bf16": {"wall_s": 100.0}, "lightning": {"wall_s": None},
                                   "lightning_bf16": {"wall_s": 200.0}}, metrics)
        self.assertAlmostEqual(metrics["kdp_vs_torch_best_time_to_91_cnn"]["value"], 0.6)
        self.assertAlmostEqual(metrics["kdp_vs_lightning_best_time_to_91_cnn"]["value"], 0.3)
        self.assertNotIn("kdp_vs_torch_time_to_91_cnn", metrics)

    def test_a_full_run_leaves_the_extra_runs_to_only_and_extra(self):
        saved = run_suite.baselines.bf16_units
        run_suite.baselines.bf16_units = lambda: True  # EXTRA as it stands, whatever this CPU is
        self.addCleanup(setattr, run_suite.baselines, "bf16_units", saved)
        full = self.listed()
        self.assertTrue(run_suite.EXTRA)
        for name in run_suite.EXTRA:
            self.assertNotIn(name, full)
            self.assertIn(name, self.listed("--extra"))
            # (after the data's import where the run reads Fashion-MNIST)
            self.assertEqual([n for n in self.listed("--only", f"^{name}$") if n != run_suite.IMPORT], [name])
        # Everything else a full run does, --extra does too.
        self.assertEqual([n for n in self.listed("--extra") if n not in run_suite.EXTRA], full)


if __name__ == "__main__":
    unittest.main()
