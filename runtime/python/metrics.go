package python

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Bounds on what models can register through pb_utils.MetricFamily, so
// that a model creating metrics in a loop cannot grow the server without
// limit.
const (
	maxMetricFamilies = 1024
	maxMetrics        = 16384
	maxBuckets        = 256
)

// Metric kinds, as pb_utils names them.
const (
	kindCounter   = "COUNTER"
	kindGauge     = "GAUGE"
	kindHistogram = "HISTOGRAM"
)

var metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// CustomMetrics holds the metric families python models create with
// pb_utils.MetricFamily (Triton's custom metrics API) and exports them on
// /metrics as a prometheus.Collector. A family or metric lives while some
// stub holds a reference to it (the python objects), and a stub's
// references go when it ends.
type CustomMetrics struct {
	mu       sync.Mutex
	families map[string]*metricFamily
	byID     map[uint64]*customMetric
	next     uint64
	count    int // metrics alive
}

type metricFamily struct {
	name, help, kind string
	metrics          map[string]*customMetric // by label key
	refs             map[any]int
}

type customMetric struct {
	id      uint64
	fam     *metricFamily
	key     string
	names   []string // label names, sorted
	values  []string
	value   float64
	buckets []float64 // histogram upper bounds, ascending
	counts  []uint64  // per bucket, not cumulative
	sum     float64
	n       uint64
	refs    map[any]int
}

func newCustomMetrics() *CustomMetrics {
	return &CustomMetrics{families: map[string]*metricFamily{}, byID: map[uint64]*customMetric{}}
}

// Collector returns what the metrics endpoint registers to export the
// models' custom metrics.
func (b *Backend) Collector() prometheus.Collector { return b.metrics }

// Describe sends nothing: the families come and go with the models (an
// unchecked collector).
func (c *CustomMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *CustomMetrics) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.families {
		for _, m := range f.metrics {
			desc := prometheus.NewDesc(f.name, f.help, m.names, nil)
			var pm prometheus.Metric
			var err error
			switch f.kind {
			case kindCounter:
				pm, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, m.value, m.values...)
			case kindGauge:
				pm, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, m.value, m.values...)
			default:
				cum := make(map[float64]uint64, len(m.buckets))
				var total uint64
				for i, ub := range m.buckets {
					total += m.counts[i]
					cum[ub] = total
				}
				pm, err = prometheus.NewConstHistogram(desc, m.n, m.sum, cum, m.values...)
			}
			if err == nil {
				ch <- pm
			}
		}
	}
}

// call serves the pb_utils metric calls of one stub (owner). ok is false
// for a function that is not a metrics call.
func (c *CustomMetrics) call(owner any, fn string, args json.RawMessage) (value any, ok bool, err error) {
	var a struct {
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Kind        string            `json:"kind"`
		Family      string            `json:"family"`
		Labels      map[string]string `json:"labels"`
		Buckets     []float64         `json:"buckets"`
		ID          uint64            `json:"id"`
		Value       float64           `json:"value"`
	}
	switch fn {
	case "metric_family", "metric_family_del", "metric", "metric_del", "metric_increment", "metric_set", "metric_observe", "metric_value":
	default:
		return nil, false, nil
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, true, backend.Errorf(backend.InvalidArg, "%s: bad arguments: %w", fn, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fn {
	case "metric_family":
		return nil, true, c.family(owner, a.Name, a.Description, a.Kind)
	case "metric_family_del":
		if f := c.families[a.Name]; f != nil {
			c.unrefFamily(owner, f, 1)
		}
		return nil, true, nil
	case "metric":
		id, err := c.metric(owner, a.Family, a.Labels, a.Buckets)
		return id, true, err
	case "metric_del":
		if m := c.byID[a.ID]; m != nil {
			c.unrefMetric(owner, m, 1)
		}
		return nil, true, nil
	}
	m := c.byID[a.ID]
	if m == nil {
		return nil, true, backend.Errorf(backend.NotFound, "%s: the metric no longer exists", fn)
	}
	switch fn {
	case "metric_increment":
		if m.fam.kind == kindHistogram {
			return nil, true, backend.Errorf(backend.Unsupported, "increment is not supported for HISTOGRAM metrics; use observe")
		}
		if m.fam.kind == kindCounter && a.Value < 0 {
			return nil, true, backend.Errorf(backend.InvalidArg, "a COUNTER metric cannot be incremented by a negative value (%g)", a.Value)
		}
		m.value += a.Value
	case "metric_set":
		if m.fam.kind != kindGauge {
			return nil, true, backend.Errorf(backend.Unsupported, "set is supported for GAUGE metrics only, %s is a %s", m.fam.name, m.fam.kind)
		}
		m.value = a.Value
	case "metric_observe":
		if m.fam.kind != kindHistogram {
			return nil, true, backend.Errorf(backend.Unsupported, "observe is supported for HISTOGRAM metrics only, %s is a %s", m.fam.name, m.fam.kind)
		}
		i := sort.SearchFloat64s(m.buckets, a.Value)
		if i < len(m.counts) {
			m.counts[i]++
		}
		m.sum += a.Value
		m.n++
	case "metric_value":
		if m.fam.kind == kindHistogram {
			return nil, true, backend.Errorf(backend.Unsupported, "value is not supported for HISTOGRAM metrics")
		}
	}
	return m.value, true, nil
}

func (c *CustomMetrics) family(owner any, name, help, kind string) error {
	switch kind {
	case kindCounter, kindGauge, kindHistogram:
	default:
		return backend.Errorf(backend.InvalidArg, "MetricFamily %q: kind must be COUNTER, GAUGE or HISTOGRAM, got %q", name, kind)
	}
	if !metricNameRE.MatchString(name) || strings.HasPrefix(name, "nv_") {
		return backend.Errorf(backend.InvalidArg, "MetricFamily name %q is not a valid metric name (letters, digits, '_' and ':', not starting with a digit, and not Triton's nv_ prefix)", name)
	}
	f := c.families[name]
	if f == nil {
		if len(c.families) >= maxMetricFamilies {
			return backend.Errorf(backend.Unavailable, "MetricFamily %q: the server holds %d custom metric families already, the maximum", name, maxMetricFamilies)
		}
		f = &metricFamily{name: name, help: help, kind: kind, metrics: map[string]*customMetric{}, refs: map[any]int{}}
		c.families[name] = f
	} else if f.kind != kind {
		return backend.Errorf(backend.InvalidArg, "MetricFamily %q exists already with kind %s, not %s", name, f.kind, kind)
	}
	f.refs[owner]++
	return nil
}

func (c *CustomMetrics) metric(owner any, family string, labels map[string]string, buckets []float64) (uint64, error) {
	f := c.families[family]
	if f == nil {
		return 0, backend.Errorf(backend.NotFound, "Metric: no MetricFamily %q", family)
	}
	names := make([]string, 0, len(labels))
	for k := range labels {
		if !labelNameRE.MatchString(k) {
			return 0, backend.Errorf(backend.InvalidArg, "Metric of %q: %q is not a valid label name", family, k)
		}
		names = append(names, k)
	}
	slices.Sort(names)
	values := make([]string, len(names))
	var key strings.Builder
	for i, k := range names {
		values[i] = labels[k]
		fmt.Fprintf(&key, "%q=%q,", k, labels[k])
	}
	if f.kind == kindHistogram {
		if len(buckets) == 0 || len(buckets) > maxBuckets || !slices.IsSorted(buckets) {
			return 0, backend.Errorf(backend.InvalidArg, "Metric of HISTOGRAM %q needs 1 to %d buckets in ascending order", family, maxBuckets)
		}
		for _, b := range buckets {
			if math.IsNaN(b) {
				return 0, backend.Errorf(backend.InvalidArg, "Metric of HISTOGRAM %q: NaN bucket", family)
			}
		}
		fmt.Fprint(&key, buckets)
	} else if len(buckets) > 0 {
		return 0, backend.Errorf(backend.InvalidArg, "Metric of %s %q: buckets are for HISTOGRAM metrics only", f.kind, family)
	}
	m := f.metrics[key.String()]
	if m == nil {
		for _, other := range f.metrics {
			if !slices.Equal(other.names, names) {
				return 0, backend.Errorf(backend.InvalidArg, "Metric of %q: label names %v differ from the family's %v", family, names, other.names)
			}
			break
		}
		if c.count >= maxMetrics {
			return 0, backend.Errorf(backend.Unavailable, "Metric of %q: the server holds %d custom metrics already, the maximum", family, maxMetrics)
		}
		c.next++
		m = &customMetric{id: c.next, fam: f, key: key.String(), names: names, values: values, refs: map[any]int{}}
		if f.kind == kindHistogram {
			m.buckets = slices.Clone(buckets)
			m.counts = make([]uint64, len(buckets))
		}
		f.metrics[m.key] = m
		c.byID[m.id] = m
		c.count++
	}
	m.refs[owner]++
	return m.id, nil
}

func (c *CustomMetrics) unrefMetric(owner any, m *customMetric, n int) {
	if m.refs[owner] -= n; m.refs[owner] <= 0 {
		delete(m.refs, owner)
	}
	if len(m.refs) == 0 {
		delete(m.fam.metrics, m.key)
		delete(c.byID, m.id)
		c.count--
		if len(m.fam.metrics) == 0 && len(m.fam.refs) == 0 {
			delete(c.families, m.fam.name)
		}
	}
}

func (c *CustomMetrics) unrefFamily(owner any, f *metricFamily, n int) {
	if f.refs[owner] -= n; f.refs[owner] <= 0 {
		delete(f.refs, owner)
	}
	if len(f.refs) == 0 && len(f.metrics) == 0 {
		delete(c.families, f.name)
	}
}

// release drops every reference owner holds (its stub ended).
func (c *CustomMetrics) release(owner any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.byID {
		if n := m.refs[owner]; n > 0 {
			c.unrefMetric(owner, m, n)
		}
	}
	for _, f := range c.families {
		if n := f.refs[owner]; n > 0 {
			c.unrefFamily(owner, f, n)
		} else if len(f.refs) == 0 && len(f.metrics) == 0 {
			delete(c.families, f.name)
		}
	}
}
