package repository

import (
	"fmt"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// batchIO validates batch_input and batch_output with Triton's texts
// (ValidateBatchIO) plus what a backend here relies on: every batch input
// names a target that is no input of the model and derives from an input
// every request carries; batch outputs scatter fixed-size outputs. inputs
// and outputs are the backend's view (after reshape).
func batchIO(cfg *modelconfig.ModelConfig, inputs, outputs []backend.TensorSpec) ([]backend.BatchInput, []backend.BatchOutput, error) {
	in := make(map[string]*backend.TensorSpec, len(inputs))
	for i := range inputs {
		in[inputs[i].Name] = &inputs[i]
	}
	out := make(map[string]*backend.TensorSpec, len(outputs))
	for i := range outputs {
		out[outputs[i].Name] = &outputs[i]
	}
	source := func(names []string) (string, error) {
		for _, n := range names {
			s, ok := in[n]
			if !ok {
				return "", fmt.Errorf("unknown source input name '%s'", n)
			}
			if s.Optional {
				// A batch input is computed from every request of the
				// batch; one without its source has nothing to give.
				return "", fmt.Errorf("source input '%s' is optional; batch inputs and outputs need it in every request", n)
			}
		}
		return names[0], nil
	}
	var bis []backend.BatchInput
	targets := map[string]bool{}
	for _, b := range cfg.GetBatchInput() {
		kind := b.GetKind()
		if _, known := modelconfig.BatchInput_Kind_name[int32(kind)]; !known {
			return nil, nil, fmt.Errorf("unknown batch input kind '%d'", int32(kind))
		}
		if n := len(b.GetSourceInput()); n != 1 {
			return nil, nil, fmt.Errorf("batch input kind '%s' expects 1 source input, got %d", kind, n)
		}
		dt := modelconfig.WireType(b.GetDataType())
		if dt != backend.Int32 && dt != backend.FP32 {
			return nil, nil, fmt.Errorf("batch input data type must be TYPE_INT32 or TYPE_FP32")
		}
		src, err := source(b.GetSourceInput())
		if err != nil {
			return nil, nil, err
		}
		if len(b.GetTargetName()) == 0 {
			return nil, nil, fmt.Errorf("batch input kind '%s' of source input '%s' names no target_name", kind, src)
		}
		for _, t := range b.GetTargetName() {
			if in[t] != nil {
				return nil, nil, fmt.Errorf("batch input target '%s' is also an input of the model; the backend adds batch inputs itself", t)
			}
			if targets[t] {
				return nil, nil, fmt.Errorf("batch input target '%s' is named twice", t)
			}
			targets[t] = true
		}
		bis = append(bis, backend.BatchInput{
			Kind:     backend.BatchInputKind(kind),
			Targets:  append([]string(nil), b.GetTargetName()...),
			DataType: dt,
			Source:   src,
		})
	}
	var bos []backend.BatchOutput
	scattered := map[string]bool{}
	for _, b := range cfg.GetBatchOutput() {
		kind := b.GetKind()
		if kind != modelconfig.BatchOutput_BATCH_SCATTER_WITH_INPUT_SHAPE {
			return nil, nil, fmt.Errorf("unknown batch output kind '%s'", kind)
		}
		if n := len(b.GetSourceInput()); n != 1 {
			return nil, nil, fmt.Errorf("batch output kind '%s' expects 1 source input, got %d", kind, n)
		}
		src, err := source(b.GetSourceInput())
		if err != nil {
			return nil, nil, err
		}
		seen := map[string]bool{}
		for _, t := range b.GetTargetName() {
			o, ok := out[t]
			if !ok {
				return nil, nil, fmt.Errorf("unknown target output name '%s'", t)
			}
			if seen[t] {
				return nil, nil, fmt.Errorf("target output name '%s' can only be specified once", t)
			}
			seen[t] = true
			if scattered[t] {
				return nil, nil, fmt.Errorf("output '%s' is the target of two batch outputs", t)
			}
			scattered[t] = true
			if o.DataType.Size() == 0 {
				// As Triton's libtorch backend: strings cannot be scattered.
				return nil, nil, fmt.Errorf("batch output target '%s' has data type %s; batch outputs need fixed-size elements", t, o.DataType)
			}
		}
		bos = append(bos, backend.BatchOutput{Targets: append([]string(nil), b.GetTargetName()...), Source: src})
	}
	return bis, bos, nil
}
