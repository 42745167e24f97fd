"""pb_utils.MetricFamily and Metric as python_backend's custom_metrics
example uses them, plus a gauge and a histogram."""
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.total = pb_utils.MetricFamily(name="example_elements_total", description="Elements received",
                                           kind=pb_utils.COUNTER).Metric(labels=labels)
        self.last = pb_utils.MetricFamily(name="example_last_sum", description="Sum of the last request",
                                          kind=pb_utils.MetricFamily.GAUGE).Metric(labels=labels)
        self.sizes = pb_utils.MetricFamily(name="example_request_elements", description="Elements per request",
                                           kind=pb_utils.MetricFamily.HISTOGRAM).Metric(labels=labels,
                                                                                        buckets=[1, 4, 16])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.total.increment(x.size)
            self.last.set(float(x.sum()))
            self.sizes.observe(x.size)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", np.array([self.total.value()]))]))
        return out
