// Package metrics exports Triton's Prometheus metrics (nv_inference_*,
// nv_cpu_*) for the models of a repository.Manager, and one of ours:
// tritonbuild_model_active_instances.
//
// Model counters are not kept twice: a collector reads each scheduler's
// statistics at scrape time, so the request path pays nothing for metrics.
// Each server gets its own registry; the global default registry is unused.
package metrics

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// Models is what the collector needs from the model manager.
type Models interface {
	Models() []*repository.Model
}

// NewRegistry returns a registry holding the model and CPU collectors
// with Triton's default metrics configuration.
func NewRegistry(models Models) *prometheus.Registry {
	return NewRegistryWith(models, DefaultConfig(), nil)
}

// NewRegistryWith returns a registry for cfg; sums are the latency
// summaries the schedulers observe (nil without summary_latencies).
func NewRegistryWith(models Models, cfg Config, sums *Summaries) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newModelCollector(models, cfg.CounterLatencies), pinnedCollector(cfg.PinnedPoolBytes))
	if cfg.CPU {
		reg.MustRegister(&cpuCollector{interval: cfg.Interval})
	}
	if sums != nil {
		reg.MustRegister(sums.request, sums.queue, sums.in, sums.infer, sums.out)
	}
	return reg
}

// Handler is the metrics port as Triton serves it: GET /metrics (or
// /metrics/) answers reg in the Prometheus text format; any other method
// is 405 with Triton's JSON error, `{"error":"Method Not Allowed"}`; a
// GET of any other path is 200 with an empty text/plain body, as
// Triton's metrics server answers every path and fills only /metrics.
func Handler(reg *prometheus.Registry) http.Handler {
	prom := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = w.Write([]byte(`{"error":"Method Not Allowed"}`))
			return
		}
		if r.URL.Path == "/metrics" || r.URL.Path == "/metrics/" {
			prom.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
	})
}

var modelLabels = []string{"model", "version"}

type modelCollector struct {
	models                                    Models
	latencies                                 bool // counter_latencies
	success, failure, count, exec             *prometheus.Desc
	reqDur, queueDur, inDur, inferDur, outDur *prometheus.Desc
	pending                                   *prometheus.Desc
	// active is ours, not Triton's (which has no such count): how many of
	// the model's instances may execute at once (scheduler.Active).
	active *prometheus.Desc
	// Triton's per-model response cache metrics, for models that cache.
	cacheHits, cacheMisses, cacheHitDur, cacheMissDur *prometheus.Desc
}

func newModelCollector(models Models, latencies bool) *modelCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, modelLabels, nil) }
	return &modelCollector{
		models: models, latencies: latencies,
		success:  d("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
		failure:  prometheus.NewDesc("nv_inference_request_failure", "Number of failed inference requests, all batch sizes", []string{"model", "reason", "version"}, nil),
		count:    d("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
		exec:     d("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
		reqDur:   d("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (includes cached requests)"),
		queueDur: d("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds (includes cached requests)"),
		inDur:    d("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds (does not include cached requests)"),
		inferDur: d("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds (does not include cached requests)"),
		outDur:   d("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
		pending:  d("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting execution per-model."),
		active: d("tritonbuild_model_active_instances", "Instances of the model allowed to execute at once: its instance count, "+
			"or fewer while the python backend's execute-concurrency=auto finds their executes waiting for a core."),

		cacheHits:    d("nv_cache_num_hits_per_model", "Number of cache hits per model"),
		cacheMisses:  d("nv_cache_num_misses_per_model", "Number of cache misses per model"),
		cacheHitDur:  d("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds"),
		cacheMissDur: d("nv_cache_miss_duration_per_model", "Total cache miss (lookup and insertion) duration per model, in microseconds"),
	}
}

func (c *modelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.success, c.failure, c.count, c.exec, c.reqDur, c.queueDur, c.inDur, c.inferDur, c.outDur, c.pending, c.active,
		c.cacheHits, c.cacheMisses, c.cacheHitDur, c.cacheMissDur} {
		ch <- d
	}
}

func (c *modelCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.models.Models() {
		st := m.Scheduler.Stats()
		v := m.VersionString()
		counter := func(d *prometheus.Desc, x float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, x, m.Name, v)
		}
		counter(c.success, float64(st.Success.Count))
		for i, n := range st.Failures {
			ch <- prometheus.MustNewConstMetric(c.failure, prometheus.CounterValue, float64(n), m.Name, scheduler.FailureReasonNames[i], v)
		}
		counter(c.count, float64(st.InferenceCount))
		counter(c.exec, float64(st.ExecutionCount))
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(m.Scheduler.Queued()), m.Name, v)
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(m.Scheduler.Active()), m.Name, v)
		caching := m.Scheduler.Caching()
		if caching {
			counter(c.cacheHits, float64(st.CacheHit.Count))
			counter(c.cacheMisses, float64(st.CacheMiss.Count))
		}
		if !c.latencies {
			continue
		}
		counter(c.reqDur, float64(st.Success.Ns+st.Fail.Ns)/1e3)
		counter(c.queueDur, float64(st.Queue.Ns)/1e3)
		counter(c.inDur, float64(st.ComputeInput.Ns)/1e3)
		counter(c.inferDur, float64(st.ComputeInfer.Ns)/1e3)
		counter(c.outDur, float64(st.ComputeOutput.Ns)/1e3)
		if caching {
			counter(c.cacheHitDur, float64(st.CacheHit.Ns)/1e3)
			counter(c.cacheMissDur, float64(st.CacheMiss.Ns)/1e3)
		}
	}
}

// cpuCollector reports CPU utilization since the previous scrape (from
// /proc/stat) and memory from /proc/meminfo. On systems without /proc the
// metrics are simply absent.
type cpuCollector struct {
	interval        time.Duration // --metrics-interval-ms
	mu              sync.Mutex
	lastIdle, lastT uint64
	sampled         time.Time
	util            float64
}

var (
	cpuUtil = prometheus.NewDesc("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", nil, nil)
	memTot  = prometheus.NewDesc("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", nil, nil)
	memUsed = prometheus.NewDesc("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", nil, nil)
)

func (c *cpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cpuUtil
	ch <- memTot
	ch <- memUsed
}

func (c *cpuCollector) Collect(ch chan<- prometheus.Metric) {
	// Utilization is over the last whole interval, as Triton's "per
	// interval" CPU metrics: scrapes within an interval see one sample.
	c.mu.Lock()
	if time.Since(c.sampled) >= c.interval {
		if idle, total, ok := readCPU(); ok {
			if dt := total - c.lastT; c.lastT != 0 && total > c.lastT {
				c.util = 1 - float64(idle-c.lastIdle)/float64(dt)
			}
			c.lastIdle, c.lastT, c.sampled = idle, total, time.Now()
		}
	}
	util, have := c.util, c.lastT != 0
	c.mu.Unlock()
	if have {
		ch <- prometheus.MustNewConstMetric(cpuUtil, prometheus.GaugeValue, util)
	}
	if total, avail, ok := readMem(); ok {
		ch <- prometheus.MustNewConstMetric(memTot, prometheus.GaugeValue, float64(total))
		ch <- prometheus.MustNewConstMetric(memUsed, prometheus.GaugeValue, float64(total-avail))
	}
}

// readCPU returns the idle (idle+iowait) and total jiffies of all CPUs.
func readCPU() (idle, total uint64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total, true
}

func readMem() (total, avail uint64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var haveT, haveA bool
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "MemTotal":
			total, haveT = n*1024, true
		case "MemAvailable":
			avail, haveA = n*1024, true
		}
	}
	return total, avail, haveT && haveA && avail <= total
}
