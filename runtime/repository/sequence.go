package repository

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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
func sequenceConfig(cfg *modelconfig.ModelConfig, inputs, outputs []backend.TensorSpec) (*scheduler.Sequence, []string, error) {
	sb := cfg.GetSequenceBatching()
	out := &scheduler.Sequence{MaxIdle: micros(sb.GetMaxSequenceIdleMicroseconds()), Iterative: sb.GetIterativeSequence()}
	if out.MaxIdle == 0 {
		out.MaxIdle = defaultMaxSequenceIdle
	}
	if o := sb.GetOldest(); o != nil {
		out.Strategy = scheduler.Oldest
		out.MaxQueueDelay = micros(o.GetMaxQueueDelayMicroseconds())
		if o.GetMaxCandidateSequences() < 0 {
			return nil, nil, fmt.Errorf("sequence_batching oldest max_candidate_sequences %d must not be negative", o.GetMaxCandidateSequences())
		}
		out.MaxCandidates = int(o.GetMaxCandidateSequences())
		if out.MaxCandidates > MaxSequenceSlots {
			return nil, nil, fmt.Errorf("sequence_batching oldest max_candidate_sequences %d: at most %d per instance", out.MaxCandidates, MaxSequenceSlots)
		}
		for _, p := range o.GetPreferredBatchSize() {
			if p < 1 || p > max(cfg.MaxBatchSize, 1) {
				return nil, nil, fmt.Errorf("sequence_batching oldest preferred_batch_size %d must be between 1 and max_batch_size %d", p, cfg.MaxBatchSize)
			}
			out.PreferredBatchSizes = append(out.PreferredBatchSizes, int(p))
		}
	} else {
		d := sb.GetDirect()
		out.MaxQueueDelay = micros(d.GetMaxQueueDelayMicroseconds())
		out.MinSlotUtilization = float64(d.GetMinimumSlotUtilization())
		if out.MinSlotUtilization < 0 || out.MinSlotUtilization > 1 {
			return nil, nil, fmt.Errorf("sequence_batching direct minimum_slot_utilization %g must be between 0 and 1", out.MinSlotUtilization)
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
			return nil, nil, fmt.Errorf("sequence_batching control_input[%d] has no name", i)
		}
		if names[name] {
			return nil, nil, fmt.Errorf("sequence_batching control input '%s' is declared twice", name)
		}
		names[name] = true
		if declared[name] {
			return nil, nil, fmt.Errorf("sequence_batching control input '%s' is also a model input; the server provides control inputs, so they must not be listed in input", name)
		}
		if len(ci.GetControl()) != 1 {
			return nil, nil, fmt.Errorf("sequence_batching control input '%s' must have exactly one control, has %d", name, len(ci.GetControl()))
		}
		c := ci.GetControl()[0]
		if prev, dup := seen[c.GetKind()]; dup {
			return nil, nil, fmt.Errorf("sequence_batching specifies multiple %s tensors for %s ('%s' and '%s')", c.GetKind(), cfg.GetName(), prev, name)
		}
		seen[c.GetKind()] = name
		ctl, err := control(name, c)
		if err != nil {
			return nil, nil, err
		}
		out.Controls = append(out.Controls, ctl)
	}
	files, err := stateConfigs(cfg, out, declared, names, outputs)
	if err != nil {
		return nil, nil, err
	}
	return out, files, nil
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

// stateConfigs resolves sequence_batching.state into out.States and
// returns each state's initial_state data_file ("" for none), read per
// version by sequenceStates. inputs and controls are the names already
// taken by model and control inputs.
func stateConfigs(cfg *modelconfig.ModelConfig, out *scheduler.Sequence, inputs, controls map[string]bool, outputs []backend.TensorSpec) ([]string, error) {
	states := cfg.GetSequenceBatching().GetState()
	if len(states) == 0 {
		return nil, nil
	}
	if cfg.GetModelTransactionPolicy().GetDecoupled() {
		return nil, fmt.Errorf("sequence_batching state: implicit state is not supported for models with the decoupled transaction policy")
	}
	var files []string
	ins, outs := map[string]bool{}, map[string]bool{}
	for i, st := range states {
		in, on := st.GetInputName(), st.GetOutputName()
		where := fmt.Sprintf("sequence_batching state[%d]", i)
		if in == "" || on == "" {
			return nil, fmt.Errorf("%s must give both input_name and output_name", where)
		}
		where = fmt.Sprintf("sequence_batching state '%s'", in)
		switch {
		case ins[in]:
			return nil, fmt.Errorf("%s: input_name is used by another state", where)
		case outs[on]:
			return nil, fmt.Errorf("%s: output_name '%s' is used by another state", where, on)
		case inputs[in]:
			return nil, fmt.Errorf("%s is also a model input; the server provides state inputs, so they must not be listed in input", where)
		case controls[in]:
			return nil, fmt.Errorf("%s is also a control input", where)
		}
		ins[in], outs[on] = true, true
		dt := modelconfig.WireType(st.GetDataType())
		if !dt.Valid() {
			return nil, fmt.Errorf("%s has no valid data_type", where)
		}
		dims := st.GetDims()
		if len(dims) == 0 {
			return nil, fmt.Errorf("%s must give dims", where)
		}
		for _, d := range dims {
			if d == 0 || d < -1 {
				return nil, fmt.Errorf("%s has invalid dimension %d", where, d)
			}
		}
		s := scheduler.State{Input: in, Output: on, DataType: dt, Dims: slices.Clone(dims)}
		for _, o := range outputs {
			if o.Name == on {
				if o.DataType != dt {
					return nil, fmt.Errorf("%s: output '%s' is declared as %s but the state is %s", where, on, o.DataType, dt)
				}
				s.Declared = true
			}
		}
		file := ""
		switch inits := st.GetInitialState(); len(inits) {
		case 0:
			// Triton hands the START request uninitialized data, 1 for each
			// variable dimension; zeros are one such value.
			for _, d := range dims {
				s.InitialShape = append(s.InitialShape, max(d, 1))
			}
		case 1:
			init := inits[0]
			if idt := modelconfig.WireType(init.GetDataType()); idt != dt {
				return nil, fmt.Errorf("%s: initial_state '%s' has data_type %s, the state is %s", where, init.GetName(), idt, dt)
			}
			idims := init.GetDims()
			ok := len(idims) == len(dims)
			for d := 0; ok && d < len(idims); d++ {
				ok = idims[d] > 0 && (dims[d] == -1 || dims[d] == idims[d])
			}
			if !ok {
				return nil, fmt.Errorf("%s: initial_state '%s' dims %v must be fixed and fit the state's dims %v", where, init.GetName(), idims, dims)
			}
			s.InitialShape = slices.Clone(idims)
			switch src := init.GetStateData().(type) {
			case *modelconfig.ModelSequenceBatching_InitialState_ZeroData:
				if !src.ZeroData {
					return nil, fmt.Errorf("%s: initial_state '%s' must set zero_data: true or data_file", where, init.GetName())
				}
			case *modelconfig.ModelSequenceBatching_InitialState_DataFile:
				if dt == backend.Bytes {
					return nil, fmt.Errorf("%s: initial_state '%s': data_file is not supported for TYPE_STRING states (use zero_data)", where, init.GetName())
				}
				if !filepath.IsLocal(src.DataFile) {
					return nil, fmt.Errorf("%s: initial_state '%s' data_file %q must name a file inside the model's initial_state directory", where, init.GetName(), src.DataFile)
				}
				file = src.DataFile
			default:
				return nil, fmt.Errorf("%s: initial_state '%s' must set zero_data or data_file", where, init.GetName())
			}
		default:
			return nil, fmt.Errorf("%s has %d initial_state entries; at most one is allowed", where, len(inits))
		}
		elems := elementCount(s.InitialShape)
		size := int64(dt.Size())
		if dt == backend.Bytes {
			size = 4 // empty strings
		}
		if elems < 0 || elems > scheduler.MaxStateBytes/size {
			return nil, fmt.Errorf("%s: the initial state of %v is larger than %d bytes", where, s.InitialShape, scheduler.MaxStateBytes)
		}
		s.Initial = make([]byte, elems*size)
		out.States = append(out.States, s)
		files = append(files, file)
	}
	return files, nil
}

// sequenceStates returns seq with the initial states read from the
// initial_state directory of the model in dir (files as stateConfigs
// returned them), or seq itself when no state names a file.
func sequenceStates(seq *scheduler.Sequence, dir string, files []string) (*scheduler.Sequence, error) {
	if !slices.ContainsFunc(files, func(f string) bool { return f != "" }) {
		return seq, nil
	}
	cp := *seq
	cp.States = slices.Clone(seq.States)
	for i, f := range files {
		if f == "" {
			continue
		}
		st := &cp.States[i]
		p, err := backend.Confine(dir, filepath.Join(dir, "initial_state"), f, "data_file")
		if err != nil {
			return nil, fmt.Errorf("sequence_batching state '%s': %w", st.Input, err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("sequence_batching state '%s': initial_state/%s: %w", st.Input, f, errors.Unwrap(err))
		}
		if want := int64(len(st.Initial)); fi.Size() != want {
			return nil, fmt.Errorf("sequence_batching state '%s': initial_state/%s holds %d bytes, expected %d for %s %v", st.Input, f, fi.Size(), want, st.DataType, st.InitialShape)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("sequence_batching state '%s': reading initial_state/%s: %w", st.Input, f, errors.Unwrap(err))
		}
		if len(data) != len(st.Initial) {
			return nil, fmt.Errorf("sequence_batching state '%s': initial_state/%s changed while it was read", st.Input, f)
		}
		st.Initial = data
	}
	return &cp, nil
}
