package metrics

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// Config is Triton's metrics configuration: --metrics-config settings,
// --metrics-interval-ms, --allow-cpu-metrics and the pinned memory pool
// size the pool gauges report.
type Config struct {
	CounterLatencies bool // counter_latencies (default true)
	SummaryLatencies bool // summary_latencies (default false)
	// Quantiles are summary_quantiles: quantile -> allowed error.
	Quantiles map[float64]float64
	CPU       bool          // --allow-cpu-metrics (default true)
	Interval  time.Duration // --metrics-interval-ms (default 2000)
	// PinnedPoolBytes is --pinned-memory-pool-byte-size (default 256 MiB).
	// This server keeps no pinned pool (there is no GPU to copy to), so
	// nv_pinned_memory_pool_used_bytes stays 0.
	PinnedPoolBytes int64
}

// DefaultConfig is Triton's default.
func DefaultConfig() Config {
	return Config{
		CounterLatencies: true, CPU: true, Interval: 2 * time.Second, PinnedPoolBytes: 1 << 28,
		Quantiles: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.95: 0.001, 0.99: 0.001, 0.999: 0.001},
	}
}

// Apply sets one --metrics-config <setting>=<value>.
func (c *Config) Apply(setting string) error {
	k, v, ok := strings.Cut(setting, "=")
	if !ok || k == "" || v == "" || strings.Contains(k, ",") {
		return fmt.Errorf("--metrics-config option format is <setting>=<value>. Got %s", setting)
	}
	boolean := func(dst *bool) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("--metrics-config %s=%s: want true or false", k, v)
		}
		*dst = b
		return nil
	}
	switch k {
	case "counter_latencies":
		return boolean(&c.CounterLatencies)
	case "summary_latencies":
		return boolean(&c.SummaryLatencies)
	case "histogram_latencies":
		// Triton's histograms time decoupled models' first responses; this
		// server serves no decoupled models, so there is nothing to show.
		var b bool
		return boolean(&b)
	case "summary_quantiles":
		q := map[float64]float64{}
		for _, pair := range strings.Split(strings.Trim(v, `"`), ",") {
			qs, es, ok := strings.Cut(strings.TrimSpace(pair), ":")
			qv, err1 := strconv.ParseFloat(qs, 64)
			ev, err2 := strconv.ParseFloat(es, 64)
			if !ok || err1 != nil || err2 != nil || qv < 0 || qv > 1 || ev < 0 || ev > 1 {
				return fmt.Errorf("--metrics-config summary_quantiles=%s: want <quantile>:<error>,... with values in [0,1]", v)
			}
			q[qv] = ev
		}
		c.Quantiles = q
		return nil
	}
	return fmt.Errorf("--metrics-config: unknown setting %q (known: counter_latencies, summary_latencies, summary_quantiles, histogram_latencies)", k)
}

// Summaries are the latency summaries of summary_latencies, fed by the
// schedulers' observers.
type Summaries struct {
	request, queue, in, infer, out *prometheus.SummaryVec
}

// NewSummaries returns the summaries of cfg, or nil when cfg has
// summary_latencies off.
func NewSummaries(cfg Config) *Summaries {
	if !cfg.SummaryLatencies {
		return nil
	}
	sv := func(name, help string) *prometheus.SummaryVec {
		return prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: name, Help: help, Objectives: cfg.Quantiles, MaxAge: time.Minute}, modelLabels)
	}
	return &Summaries{
		request: sv("nv_inference_request_summary_us", "Summary of inference request duration in microseconds (includes cached requests)"),
		queue:   sv("nv_inference_queue_summary_us", "Summary of inference queuing duration in microseconds (includes cached requests)"),
		in:      sv("nv_inference_compute_input_summary_us", "Summary of compute input duration in microseconds (does not include cached requests)"),
		infer:   sv("nv_inference_compute_infer_summary_us", "Summary of compute inference duration in microseconds (does not include cached requests)"),
		out:     sv("nv_inference_compute_output_summary_us", "Summary of inference compute output duration in microseconds (does not include cached requests)"),
	}
}

// Observer returns the observer of one model version's scheduler; nil
// summaries give nil (no observation at all).
func (s *Summaries) Observer(model string, version int64) scheduler.Observer {
	if s == nil {
		return nil
	}
	v := strconv.FormatInt(version, 10)
	return &observer{
		request: s.request.WithLabelValues(model, v), queue: s.queue.WithLabelValues(model, v),
		in: s.in.WithLabelValues(model, v), infer: s.infer.WithLabelValues(model, v), out: s.out.WithLabelValues(model, v),
	}
}

type observer struct{ request, queue, in, infer, out prometheus.Observer }

func (o *observer) Observe(queue, in, infer, out, total time.Duration) {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	o.request.Observe(us(total))
	o.queue.Observe(us(queue))
	o.in.Observe(us(in))
	o.infer.Observe(us(infer))
	o.out.Observe(us(out))
}

// pinnedCollector reports the pinned memory pool gauges.
func pinnedCollector(total int64) prometheus.Collector {
	return pinned{total: prometheus.NewDesc("nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes", nil, nil),
		used: prometheus.NewDesc("nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes", nil, nil), size: total}
}

type pinned struct {
	total, used *prometheus.Desc
	size        int64
}

func (p pinned) Describe(ch chan<- *prometheus.Desc) { ch <- p.total; ch <- p.used }
func (p pinned) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(p.total, prometheus.GaugeValue, float64(p.size))
	ch <- prometheus.MustNewConstMetric(p.used, prometheus.GaugeValue, 0)
}
