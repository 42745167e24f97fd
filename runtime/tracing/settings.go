package tracing

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Setting names of the trace extension.
const (
	KeyLevel        = "trace_level"
	KeyRate         = "trace_rate"
	KeyCount        = "trace_count"
	KeyLogFrequency = "log_frequency"
	KeyFile         = "trace_file"
	KeyMode         = "trace_mode"
)

// ParseLevel reads one level name as Triton's --trace-config level
// accepts it; 0 is OFF.
func ParseLevel(s string) (int, bool) {
	switch strings.ToLower(s) {
	case "off", "false":
		return 0, true
	case "timestamps", "true", "on", "min", "max":
		return LevelTimestamps, true
	case "tensors":
		return LevelTensors, true
	}
	return 0, false
}

// Settings answers a trace setting request for model ("" for the global
// settings): every setting, values as Triton's strings.
func (m *Manager) Settings(model string) map[string][]string {
	m.mu.Lock()
	sp := m.sampler(model)
	m.mu.Unlock()
	sp.mu.Lock()
	s := sp.Setting
	sp.mu.Unlock()
	var level []string
	if s.Level == 0 {
		level = []string{"OFF"}
	}
	if s.Level&LevelTimestamps != 0 {
		level = append(level, "TIMESTAMPS")
	}
	if s.Level&LevelTensors != 0 {
		level = append(level, "TENSORS")
	}
	out := map[string][]string{
		KeyLevel: level,
		KeyRate:  {strconv.FormatUint(uint64(s.Rate), 10)},
		KeyCount: {strconv.FormatInt(int64(s.Count), 10)},
		KeyMode:  {strings.ToUpper(m.mode)},
	}
	if m.mode == ModeTriton {
		out[KeyLogFrequency] = []string{strconv.FormatUint(uint64(s.LogFrequency), 10)}
		out[KeyFile] = []string{s.File}
	} else {
		for _, kv := range m.otel.settings {
			out[kv[0]] = append(out[kv[0]], kv[1])
		}
	}
	return out
}

// Update applies a trace setting request for model ("" global): each
// named setting gets its values, and no values clears it (a model then
// follows the global value again). All or nothing; errors are
// *backend.Error with Triton's texts.
func (m *Manager) Update(model string, upd map[string][]string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var o override
	if model != "" {
		if cur := m.overrides[model]; cur != nil {
			o = *cur
		}
	} else {
		g := m.global.Setting
		o = override{level: &g.Level, rate: &g.Rate, count: &g.Count, logFrequency: &g.LogFrequency}
	}
	for key, vals := range upd {
		clear := len(vals) == 0
		one := func() string { return vals[0] }
		switch key {
		case KeyFile:
			return backend.Errorf(backend.Unsupported, "trace file location can not be updated through network protocol")
		case KeyLevel:
			if clear {
				o.level = nil
				continue
			}
			lv := 0
			for _, v := range vals {
				l, ok := ParseLevel(v)
				if !ok {
					return backend.Errorf(backend.InvalidArg, "invalid trace level '%s' (want OFF, TIMESTAMPS or TENSORS)", v)
				}
				if l == 0 && len(vals) > 1 {
					return backend.Errorf(backend.InvalidArg, "Expect only one trace level 'OFF' is specified")
				}
				lv |= l
			}
			o.level = &lv
		case KeyRate, KeyLogFrequency:
			if clear {
				if key == KeyRate {
					o.rate = nil
				} else {
					o.logFrequency = nil
				}
				continue
			}
			n, err := strconv.ParseUint(one(), 10, 32)
			if err != nil {
				return backend.Errorf(backend.InvalidArg, "Unable to parse '%s', got: %s", key, one())
			}
			v := uint32(n)
			if key == KeyRate {
				o.rate = &v
			} else {
				o.logFrequency = &v
			}
		case KeyCount:
			if clear {
				o.count = nil
				continue
			}
			n, err := strconv.ParseInt(one(), 10, 32)
			if err != nil || n < -1 {
				return backend.Errorf(backend.InvalidArg, "Unable to parse 'trace_count'. Expecting value >= -1, got:%s", one())
			}
			v := int32(n)
			o.count = &v
		default:
			return backend.Errorf(backend.InvalidArg, "unknown trace setting '%s' (known: trace_level, trace_rate, trace_count, log_frequency, trace_file)", key)
		}
	}
	if model == "" {
		g := m.defaults // a cleared global setting returns to the startup one
		if o.level != nil {
			g.Level = *o.level
		}
		if o.rate != nil {
			g.Rate = *o.rate
		}
		if o.count != nil {
			g.Count = *o.count
		}
		if o.logFrequency != nil {
			g.LogFrequency = *o.logFrequency
		}
		if why := g.invalid(m.mode); why != "" && g.Level != 0 {
			return backend.Errorf(backend.InvalidArg, "Attempting to set invalid trace setting :%s", why)
		}
		if g != m.global.Setting {
			m.global = m.newSampler(g)
		}
	} else if o == (override{}) {
		delete(m.overrides, model)
	} else {
		m.overrides[model] = &o
	}
	m.refresh()
	return nil
}

// tensorText renders tensor data as Triton's TENSORS records do: the
// elements separated by commas (BYTES quoted; FP16 and BF16 left empty, as
// Triton leaves them).
func tensorText(t *backend.Tensor) string {
	var b []byte
	d := t.Data
	size := t.DataType.Size()
	first := true
	sep := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if t.DataType == backend.Bytes {
		for len(d) >= 4 {
			n := binary.LittleEndian.Uint32(d)
			if uint64(len(d)-4) < uint64(n) {
				break
			}
			sep()
			b = append(b, '"')
			b = append(b, d[4:4+n]...)
			b = append(b, '"')
			d = d[4+n:]
		}
		return string(b)
	}
	if size == 0 || t.DataType == backend.FP16 || t.DataType == backend.BF16 {
		return ""
	}
	for ; len(d) >= size; d = d[size:] {
		sep()
		switch t.DataType {
		case backend.Bool:
			b = strconv.AppendInt(b, int64(min(d[0], 1)), 10)
		case backend.Uint8:
			b = strconv.AppendUint(b, uint64(d[0]), 10)
		case backend.Uint16:
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint16(d)), 10)
		case backend.Uint32:
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(d)), 10)
		case backend.Uint64:
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(d), 10)
		case backend.Int8:
			b = strconv.AppendInt(b, int64(int8(d[0])), 10)
		case backend.Int16:
			b = strconv.AppendInt(b, int64(int16(binary.LittleEndian.Uint16(d))), 10)
		case backend.Int32:
			b = strconv.AppendInt(b, int64(int32(binary.LittleEndian.Uint32(d))), 10)
		case backend.Int64:
			b = strconv.AppendInt(b, int64(binary.LittleEndian.Uint64(d)), 10)
		case backend.FP32:
			b = strconv.AppendFloat(b, float64(math.Float32frombits(binary.LittleEndian.Uint32(d))), 'g', 6, 32)
		case backend.FP64:
			b = strconv.AppendFloat(b, math.Float64frombits(binary.LittleEndian.Uint64(d)), 'g', 6, 64)
		}
	}
	return string(b)
}
