#!/usr/bin/python3
"""The performance suite's per-machine baselines (perf/baselines.py), checked
with recorded results.json files: no timing here.

    test_baselines.py PERF_DIR   (the repository's perf/)
"""
import copy
import json
import os
import sys
import tempfile
import unittest

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(DATA, "..", "..", "..", "perf"))
import baselines  # noqa: E402


def result(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


class Baselines(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "baselines", "xeon.json")

    def tearDown(self):
        self.dir.cleanup()

    def three_runs(self):
        files = [os.path.join(DATA, f"xeon-run{i}.json") for i in (1, 2, 3)]
        return baselines.from_results(self.path, files)

    def test_the_key_names_cpu_cores_and_backend(self):
        self.assertEqual(baselines.machine_key("Intel(R) Xeon(R) Processor", 2, "Serial"),
                         "intel-r-xeon-r-processor-2c-serial")
        self.assertNotEqual(baselines.machine_key("AMD EPYC 7B12", 2, "Serial"),
                            baselines.machine_key("AMD EPYC 7B12", 4, "Serial"))
        self.assertNotEqual(baselines.machine_key("AMD EPYC 7B12", 2, "Serial"),
                            baselines.machine_key("AMD EPYC 7B12", 2, "OpenMP"))

    def test_two_generations_under_one_model_name_get_two_keys(self):
        keys = []
        for model in (167, 207):
            path = os.path.join(self.dir.name, f"cpuinfo-{model}")
            with open(path, "w") as f:
                for cpu in (0, 1):  # the first processor's fields count
                    f.write(f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                            f"model\t\t: {model}\nmodel name\t: Intel(R) Xeon(R) Processor\n\n")
            cpu = baselines.cpu_model(path)
            self.assertEqual(cpu, f"Intel(R) Xeon(R) Processor (family 6 model {model})")
            keys.append(baselines.machine_key(cpu, 2, "Serial"))
        self.assertEqual(keys[0], "intel-r-xeon-r-processor-family-6-model-167-2c-serial")
        self.assertNotEqual(keys[0], keys[1])

    def test_a_baseline_keeps_the_spread_of_its_runs(self):
        b = self.three_runs()
        self.assertEqual(b["runs"], 3)
        roof = b["metrics"]["model_L_roofline_1x1"]
        self.assertEqual((roof["min"], roof["median"], roof["max"]), (0.84, 0.90, 0.95))
        # Absolute times and figures without a direction are not recorded.
        self.assertNotIn("model_T_step_1x1_us", b["metrics"])
        self.assertNotIn("ddp_samples_per_s_ddp_r1", b["metrics"])
        # Shares of time near zero are compared in absolute terms, ratios relatively.
        self.assertTrue(b["metrics"]["loader_wait_share_1_thread"]["absolute"])
        self.assertFalse(b["metrics"]["dataparallel_overhead_2_devices"]["absolute"])
        with open(self.path) as f:
            self.assertEqual(json.load(f)["key"], "intel-r-xeon-r-processor-2c-serial")

    def test_a_quiet_run_inside_the_spread_is_no_regression(self):
        b = self.three_runs()
        run = result("xeon-run2.json")["metrics"]
        self.assertEqual(baselines.compare(run, b, 0.25, 0.02), [])
        self.assertEqual(run["model_L_roofline_1x1"]["baseline"], 0.90)  # the median, for the report

    def test_a_figure_beyond_the_spread_and_the_tolerance_regresses(self):
        b = self.three_runs()
        run = copy.deepcopy(result("xeon-run1.json")["metrics"])
        run["model_L_roofline_1x1"]["value"] = 0.84 * 0.74  # below lowest - 25 %
        run["dataparallel_overhead_2_devices"]["value"] = 1.16 * 1.26  # above highest + 25 %
        found = baselines.compare(run, b, 0.25, 0.02)
        self.assertEqual(len(found), 2, found)
        self.assertTrue(found[0].startswith("dataparallel_overhead_2_devices"), found)
        self.assertTrue(found[1].startswith("model_L_roofline_1x1"), found)
        # Just inside the tolerance: nothing.
        run["model_L_roofline_1x1"]["value"] = 0.84 * 0.76
        run["dataparallel_overhead_2_devices"]["value"] = 1.16 * 1.24
        self.assertEqual(baselines.compare(run, b, 0.25, 0.02), [])

    def test_a_figure_below_zero_keeps_its_spread(self):
        # Accuracy points lost by a hook, recorded at -0.14 (it gained): the
        # same value again is no regression, a loss of 0.5 point is.
        machine = {"key": "k", "cpu": "c", "cores": 2, "backend": "Serial"}
        b = baselines.record(self.path, machine, {"hook_accuracy_points_lost_bf16": {
            "value": -0.14, "target": 0.3, "better": "lower"}}, "one run")
        same = {"hook_accuracy_points_lost_bf16": {"value": -0.14, "target": 0.3, "better": "lower"}}
        self.assertEqual(baselines.compare(same, b, 0.25, 0.02), [])
        worse = {"hook_accuracy_points_lost_bf16": {"value": 0.5, "target": 0.3, "better": "lower"}}
        self.assertEqual(len(baselines.compare(worse, b, 0.25, 0.02)), 1)

    def test_a_small_share_is_compared_in_absolute_terms(self):
        b = self.three_runs()
        run = copy.deepcopy(result("xeon-run1.json")["metrics"])
        run["loader_wait_share_1_thread"]["value"] = 0.006  # 1.2x the highest, 0.001 above it
        self.assertEqual(baselines.compare(run, b, 0.25, 0.02), [])
        run["loader_wait_share_1_thread"]["value"] = 0.05
        found = baselines.compare(run, b, 0.25, 0.02)
        self.assertEqual(len(found), 1)
        self.assertIn("absolute", found[0])

    def test_another_cpu_is_never_compared_with_this_one(self):
        files = [os.path.join(DATA, "xeon-run1.json"), os.path.join(DATA, "epyc-run1.json")]
        with self.assertRaises(ValueError):
            baselines.from_results(self.path, files)

    def test_recording_adds_runs_and_keeps_the_last_few(self):
        b = None
        first = result("xeon-run1.json")
        for i in range(baselines.KEEP_RUNS + 3):
            metrics = copy.deepcopy(first["metrics"])
            metrics["model_L_roofline_1x1"]["value"] = 0.5 + 0.01 * i
            b = baselines.record(self.path, first["machine"], metrics, f"run {i}", existing=b)
        roof = b["metrics"]["model_L_roofline_1x1"]
        self.assertEqual(b["runs"], baselines.KEEP_RUNS + 3)
        self.assertEqual(len(roof["values"]), baselines.KEEP_RUNS)
        self.assertAlmostEqual(roof["min"], 0.5 + 0.01 * 3)  # the oldest three dropped
        self.assertAlmostEqual(roof["max"], 0.5 + 0.01 * (baselines.KEEP_RUNS + 2))


if __name__ == "__main__":
    unittest.main(verbosity=2)
