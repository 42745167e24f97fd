package repository

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/scheduler"
)

// defaultMaxSequenceIdle is Triton's max_sequence_idle_microseconds when
// the config leaves it 0.
const defaultMaxSequenceIdle = time.Second

func micros(us uint64) time.Duration {
	return time.Duration(min(us, uint64(math.MaxInt64/1000))) * time.Microsecond
}

// sequenceConfig turns config.pbtxt's sequence_batching into the
// scheduler's settings, refusing control inputs Triton would refuse.
func sequenceConfig(cfg *modelconfig.ModelConfig, inputs []backend.TensorSpec) (*scheduler.Sequence, error) {
	sb := cfg.GetSequenceBatching()
	out := &scheduler.Sequence{MaxIdle: micros(sb.GetMaxSequenceIdleMicroseconds())}
	if out.MaxIdle == 0 {
		out.MaxIdle = defaultMaxSequenceIdle
	}
	if o := sb.GetOldest(); o != nil {
		out.Strategy = scheduler.Oldest
		out.MaxQueueDelay = micros(o.GetMaxQueueDelayMicroseconds())
		if o.GetMaxCandidateSequences() < 0 {
			return nil, fmt.Errorf("sequence_batching oldest max_candidate_sequences %d must not be negative", o.GetMaxCandidateSequences())
		}
		out.MaxCandidates = int(o.GetMaxCandidateSequences())
		if out.MaxCandidates > MaxSequenceSlots {
			return nil, fmt.Errorf("sequence_batching oldest max_candidate_sequences %d: at most %d per instance", out.MaxCandidates, MaxSequenceSlots)
		}
		for _, p := range o.GetPreferredBatchSize() {
			if p < 1 || p > max(cfg.MaxBatchSize, 1) {
				return nil, fmt.Errorf("sequence_batching oldest preferred_batch_size %d must be between 1 and max_batch_size %d", p, cfg.MaxBatchSize)
			}
			out.PreferredBatchSizes = append(out.PreferredBatchSizes, int(p))
		}
	} else {
		d := sb.GetDirect()
		out.MaxQueueDelay = micros(d.GetMaxQueueDelayMicroseconds())
		out.MinSlotUtilization = float64(d.GetMinimumSlotUtilization())
		if out.MinSlotUtilization < 0 || out.MinSlotUtilization > 1 {
			return nil, fmt.Errorf("sequence_batching direct minimum_slot_utilization %g must be between 0 and 1", out.MinSlotUtilization)
		}
	}
	declared := map[string]bool{}
	for _, in := range inputs {
		declared[in.Name] = true
	}
	seen := map[modelconfig.ModelSequenceBatching_Control_Kind]string{}
	names := map[string]bool{}
	for i, ci := range sb.GetControlInput() {
		name := ci.GetName()
		if name == "" {
			return nil, fmt.Errorf("sequence_batching control_input[%d] has no name", i)
		}
		if names[name] {
			return nil, fmt.Errorf("sequence_batching control input '%s' is declared twice", name)
		}
		names[name] = true
		if declared[name] {
			return nil, fmt.Errorf("sequence_batching control input '%s' is also a model input; the server provides control inputs, so they must not be listed in input", name)
		}
		if len(ci.GetControl()) != 1 {
			return nil, fmt.Errorf("sequence_batching control input '%s' must have exactly one control, has %d", name, len(ci.GetControl()))
		}
		c := ci.GetControl()[0]
		if prev, dup := seen[c.GetKind()]; dup {
			return nil, fmt.Errorf("sequence_batching specifies multiple %s tensors for %s ('%s' and '%s')", c.GetKind(), cfg.GetName(), prev, name)
		}
		seen[c.GetKind()] = name
		ctl, err := control(name, c)
		if err != nil {
			return nil, err
		}
		out.Controls = append(out.Controls, ctl)
	}
	return out, nil
}

// MaxSequenceSlots bounds the candidate sequences of one instance under the
// oldest strategy (the direct strategy has max_batch_size slots).
const MaxSequenceSlots = 4096

// control resolves one control input: the data type the model is fed and,
// for the boolean kinds, the encoded false and true elements.
func control(name string, c *modelconfig.ModelSequenceBatching_Control) (scheduler.Control, error) {
	kind := c.GetKind()
	var out scheduler.Control
	out.Input = name
	switch kind {
	case modelconfig.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START:
		out.Kind = scheduler.ControlStart
	case modelconfig.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY:
		out.Kind = scheduler.ControlReady
	case modelconfig.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:
		out.Kind = scheduler.ControlEnd
	case modelconfig.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID:
		out.Kind = scheduler.ControlCorrID
		if len(c.GetInt32FalseTrue())+len(c.GetFp32FalseTrue())+len(c.GetBoolFalseTrue()) > 0 {
			return out, fmt.Errorf("sequence_batching control input '%s': %s takes a data_type, not false/true values", name, kind)
		}
		switch dt := modelconfig.WireType(c.GetDataType()); dt {
		case backend.Uint64, backend.Int64, backend.Uint32, backend.Int32, backend.Bytes:
			out.DataType = dt
		default:
			return out, fmt.Errorf("sequence_batching control input '%s': unexpected control data type, expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32, or TYPE_STRING for %s", name, kind)
		}
		return out, nil
	default:
		return out, fmt.Errorf("sequence_batching control input '%s' has unknown control kind %d", name, kind)
	}
	if c.GetDataType() != modelconfig.DataType_TYPE_INVALID {
		return out, fmt.Errorf("sequence_batching control input '%s': %s takes one of int32_false_true, fp32_false_true or bool_false_true, not a data_type", name, kind)
	}
	i32, f32, b := c.GetInt32FalseTrue(), c.GetFp32FalseTrue(), c.GetBoolFalseTrue()
	lists := 0
	for _, n := range []int{len(i32), len(f32), len(b)} {
		if n > 0 {
			lists++
			if n != 2 {
				return out, fmt.Errorf("sequence_batching control input '%s': %s false/true values must be exactly 2, got %d", name, kind, n)
			}
		}
	}
	if lists != 1 {
		return out, fmt.Errorf("sequence_batching control input '%s': %s must give exactly one of int32_false_true, fp32_false_true or bool_false_true", name, kind)
	}
	switch {
	case len(i32) == 2:
		out.DataType = backend.Int32
		out.False = binary.LittleEndian.AppendUint32(nil, uint32(i32[0]))
		out.True = binary.LittleEndian.AppendUint32(nil, uint32(i32[1]))
	case len(f32) == 2:
		out.DataType = backend.FP32
		out.False = binary.LittleEndian.AppendUint32(nil, math.Float32bits(f32[0]))
		out.True = binary.LittleEndian.AppendUint32(nil, math.Float32bits(f32[1]))
	default:
		out.DataType = backend.Bool
		enc := func(v bool) []byte {
			if v {
				return []byte{1}
			}
			return []byte{0}
		}
		out.False, out.True = enc(b[0]), enc(b[1])
	}
	return out, nil
}
