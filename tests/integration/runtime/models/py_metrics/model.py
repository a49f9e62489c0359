"""Add and subtract, counting in metric families of its own (Triton's custom metrics API) as it goes.

Per request: `py_metrics_requests{model,version}` +1 (counter), `py_metrics_elements{model}` + the size of INPUT0
(counter), `py_metrics_last_size` = that size (gauge, no labels), each value of INPUT0 observed by
`py_metrics_values{model}` (histogram, buckets 0, 1, 10). `initialize` also tries the API's misuses and every
response carries what each raised (MISUSES: "<what>: <exception type>: <message>"). With the config parameter
`MISUSES` = "stub", only those that Triton's python stub refuses itself: tritonserver 2.51 aborts
(boost::interprocess::lock_exception), in one start of two or three, when the server refuses one.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

STUB_SIDE = {"histogram without buckets", "buckets on a counter", "kind not a kind", "increment by text"}


def _outcome(what, attempt):
    try:
        attempt()
    except Exception as exc:
        return f"{what}: {type(exc).__name__}: {exc}"
    return f"{what}: accepted"


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        requests = pb_utils.MetricFamily(name="py_metrics_requests", description="Requests answered",
                                         kind=pb_utils.MetricFamily.COUNTER)
        elements = pb_utils.MetricFamily(name="py_metrics_elements", description="Elements added",
                                         kind=pb_utils.MetricFamily.COUNTER)
        last = pb_utils.MetricFamily(name="py_metrics_last_size", description="Size of the last request",
                                     kind=pb_utils.MetricFamily.GAUGE)
        values = pb_utils.MetricFamily(name="py_metrics_values", description="INPUT0 values",
                                       kind=pb_utils.MetricFamily.HISTOGRAM)
        self.families = (requests, elements, last, values)
        self.requests = requests.Metric(labels={**labels, "version": args["model_version"]})
        self.elements = elements.Metric(labels=labels)
        self.last = last.Metric()
        self.values = values.Metric(labels=labels, buckets=[0.0, 1.0, 10.0])
        misuses = {
            "another kind": lambda: pb_utils.MetricFamily("py_metrics_requests", "d", pb_utils.MetricFamily.GAUGE),
            "bad name": lambda: pb_utils.MetricFamily("9-bad", "d", pb_utils.MetricFamily.GAUGE),
            "negative count": lambda: self.requests.increment(-1),
            "set a counter": lambda: self.requests.set(3),
            "observe a gauge": lambda: self.last.observe(3),
            "increment a histogram": lambda: self.values.increment(1),
            "value of a histogram": lambda: self.values.value(),
            "histogram without buckets": lambda: values.Metric(labels={"other": "x"}),
            "unsorted buckets": lambda: values.Metric(labels={"other": "y"}, buckets=[2.0, 1.0]),
            "buckets on a counter": lambda: requests.Metric(labels={"other": "z"}, buckets=[1.0]),
            "bad label name": lambda: requests.Metric(labels={"a-b": "1"}),
            "kind not a kind": lambda: pb_utils.MetricFamily("py_metrics_other", "d", 7),
            "increment by text": lambda: self.requests.increment("1"),
        }
        which = json.loads(args["model_config"]).get("parameters", {}).get("MISUSES", {}).get("string_value", "all")
        tried = [_outcome(w, a).encode() for w, a in misuses.items() if which == "all" or w in STUB_SIDE]
        self.misuses = np.array(tried, dtype=np.object_)

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            self.requests.increment(1)
            self.elements.increment(in0.size)
            self.last.set(in0.size)
            for value in in0:
                self.values.observe(float(value))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(np.float32)),
                pb_utils.Tensor("MISUSES", self.misuses),
            ]))
        return responses
