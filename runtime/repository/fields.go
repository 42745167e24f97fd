package repository

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// UnsupportedError reports a config.pbtxt field this server parses but does
// not implement. Loading such a model fails instead of silently running it
// differently from what its config asks for.
type UnsupportedError struct {
	Field  string // dotted path, e.g. "optimization.graph.level"
	Detail string // optional, e.g. the offending enum value
}

func (e *UnsupportedError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("unsupported: %s %s", e.Field, e.Detail)
	}
	return "unsupported: " + e.Field
}

// supportedLeaves are the scalar, list and map fields (dotted paths, list
// elements not indexed) that the core implements. Message fields are walked
// into, so an empty message such as `optimization {}` is accepted and a set
// field inside it is reported by its full path.
var supportedLeaves = map[string]bool{
	"name":                   true,
	"platform":               true,
	"backend":                true,
	"max_batch_size":         true,
	"default_model_filename": true,
	"parameters":             true,

	"version_policy.latest.num_versions": true,
	"version_policy.specific.versions":   true,

	// Clients use dims, the backend the reshape (reshape.go).
	"input.reshape.shape":  true,
	"output.reshape.shape": true,
	// Pinned host buffers speed GPU transfers; with no GPUs they change
	// nothing, so the setting is shown and has no effect.
	"optimization.input_pinned_memory.enable":  true,
	"optimization.output_pinned_memory.enable": true,

	"input.name":      true,
	"input.data_type": true,
	"input.dims":      true,
	"input.optional":  true,
	// Ragged batching and batch inputs/outputs (batchio.go).
	"input.allow_ragged_batch":  true,
	"batch_input.kind":          true,
	"batch_input.target_name":   true,
	"batch_input.data_type":     true,
	"batch_input.source_input":  true,
	"batch_output.kind":         true,
	"batch_output.target_name":  true,
	"batch_output.source_input": true,
	// The format is descriptive for the frontends (no layout conversion).
	"input.format": true,

	"output.name":      true,
	"output.data_type": true,
	"output.dims":      true,
	// Class labels for the classification extension.
	"output.label_filename": true,

	"instance_group.name":  true,
	"instance_group.kind":  true, // values checked with Triton's texts (checkInstanceGroups)
	"instance_group.count": true,
	// The group's --host-policy: its cpu-cores and numa-node confine
	// python stubs and pytorch instances' forward threads, and a backend
	// that cannot apply them refuses the model (instancePolicies).
	"instance_group.host_policy": true,
	// With --rate-limit=execution_count (scheduler.RateLimiter).
	"instance_group.rate_limiter.resources.name":   true,
	"instance_group.rate_limiter.resources.global": true,
	"instance_group.rate_limiter.resources.count":  true,
	"instance_group.rate_limiter.priority":         true,
	"instance_group.gpus":                          true, // refused by checkInstanceGroups, as Triton does on CPU

	"dynamic_batching.preferred_batch_size":                true,
	"dynamic_batching.max_queue_delay_microseconds":        true,
	"dynamic_batching.default_queue_policy.max_queue_size": true,
	// The queue policies and priority levels (scheduler/queue.go).
	"dynamic_batching.default_queue_policy.timeout_action":               true,
	"dynamic_batching.default_queue_policy.default_timeout_microseconds": true,
	"dynamic_batching.default_queue_policy.allow_timeout_override":       true,
	"dynamic_batching.priority_levels":                                   true,
	"dynamic_batching.default_priority_level":                            true,
	"dynamic_batching.priority_queue_policy":                             true,
	// Responses are delivered per request, so ordering is always preserved.
	"dynamic_batching.preserve_ordering": true,

	"model_warmup.name":       true,
	"model_warmup.batch_size": true,
	"model_warmup.count":      true,
	"model_warmup.inputs":     true, // map entries checked when materializing

	"model_operations.op_library_filename": true,

	// Responses streamed through Scheduler.Stream (decoupled.go).
	"model_transaction_policy.decoupled": true,

	// The sequence batcher (scheduler/sequence.go) and its implicit state
	// (scheduler/state.go), iterative sequences included: a request the
	// backend reschedules (python's set_release_flags) runs again.
	"sequence_batching.iterative_sequence":                     true,
	"sequence_batching.max_sequence_idle_microseconds":         true,
	"sequence_batching.control_input.name":                     true,
	"sequence_batching.control_input.control.kind":             true,
	"sequence_batching.control_input.control.data_type":        true,
	"sequence_batching.control_input.control.int32_false_true": true,
	"sequence_batching.control_input.control.fp32_false_true":  true,
	"sequence_batching.control_input.control.bool_false_true":  true,
	"sequence_batching.direct.max_queue_delay_microseconds":    true,
	"sequence_batching.direct.minimum_slot_utilization":        true,
	"sequence_batching.oldest.max_candidate_sequences":         true,
	"sequence_batching.oldest.preferred_batch_size":            true,
	"sequence_batching.oldest.max_queue_delay_microseconds":    true,
	"sequence_batching.state.input_name":                       true,
	"sequence_batching.state.output_name":                      true,
	"sequence_batching.state.data_type":                        true,
	"sequence_batching.state.dims":                             true,
	"sequence_batching.state.initial_state.data_type":          true,
	"sequence_batching.state.initial_state.dims":               true,
	"sequence_batching.state.initial_state.zero_data":          true,
	"sequence_batching.state.initial_state.data_file":          true,
	"sequence_batching.state.initial_state.name":               true,
	// Ensembles (ensemble.go).
	"ensemble_scheduling.step.model_name":    true,
	"ensemble_scheduling.step.model_version": true,
	"ensemble_scheduling.step.input_map":     true,
	"ensemble_scheduling.step.output_map":    true,
	// The response cache (scheduler.Cache), with --cache-config.
	"response_cache.enable": true,
	// One response per request, answered in order per sequence.
	"sequence_batching.oldest.preserve_ordering": true,
}

// checkSupported walks every field set in cfg and reports the first one the
// core does not implement.
func checkSupported(cfg *modelconfig.ModelConfig) error {
	return walkSet(cfg.ProtoReflect(), "")
}

func walkSet(m protoreflect.Message, prefix string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := string(fd.Name())
		if prefix != "" {
			path = prefix + "." + path
		}
		if supportedLeaves[path] {
			return true
		}
		switch {
		case fd.IsMap():
			err = &UnsupportedError{Field: path}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = walkSet(l.Get(i).Message(), path)
			}
		case fd.Kind() == protoreflect.MessageKind:
			err = walkSet(v.Message(), path)
		default:
			err = &UnsupportedError{Field: path}
		}
		return err == nil
	})
	return err
}
