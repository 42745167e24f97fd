package tracing

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Carrier reads a request's headers for trace context propagation.
type Carrier = propagation.TextMapCarrier

// DefaultOTLPURL is Triton's default OTLP/HTTP receiver.
const DefaultOTLPURL = "http://localhost:4318/v1/traces"

// otelExporter is the OpenTelemetry mode's tracer provider.
type otelExporter struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	settings [][2]string // as configured, reported by the setting endpoint
}

func newOtelExporter(settings [][2]string) (*otelExporter, error) {
	url := DefaultOTLPURL
	attrs := []attribute.KeyValue{attribute.String("service.name", "triton-inference-server")}
	var bsp []sdktrace.BatchSpanProcessorOption
	reported := [][2]string{}
	for _, kv := range settings {
		k, v := kv[0], kv[1]
		switch k {
		case "url":
			url = v
		case "resource":
			rk, rv, ok := strings.Cut(v, "=")
			if !ok || rk == "" {
				return nil, fmt.Errorf("--trace-config opentelemetry,resource=%s: want <key>=<value>", v)
			}
			attrs = append(attrs, attribute.String(rk, rv))
		case "bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("--trace-config opentelemetry,%s=%s: want a positive integer", k, v)
			}
			switch k {
			case "bsp_max_queue_size":
				bsp = append(bsp, sdktrace.WithMaxQueueSize(n))
			case "bsp_schedule_delay":
				bsp = append(bsp, sdktrace.WithBatchTimeout(time.Duration(n)*time.Millisecond))
			default:
				bsp = append(bsp, sdktrace.WithMaxExportBatchSize(n))
			}
		default:
			return nil, fmt.Errorf("--trace-config opentelemetry,%s: unknown setting (known: url, resource, bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size)", k)
		}
		reported = append(reported, kv)
	}
	if !hasKey(reported, "url") {
		reported = append(reported, [2]string{"url", url})
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(url))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", url, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, bsp...),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()), // Manager samples
	)
	return &otelExporter{
		provider: provider, tracer: provider.Tracer("triton-server"),
		prop: propagation.TraceContext{}, settings: reported,
	}, nil
}

func hasKey(kvs [][2]string, k string) bool {
	for _, kv := range kvs {
		if kv[0] == k {
			return true
		}
	}
	return false
}

// extract returns the context of a valid W3C traceparent in c.
func (e *otelExporter) extract(c Carrier) (context.Context, bool) {
	if c.Get("traceparent") == "" {
		return nil, false
	}
	ctx := e.prop.Extract(context.Background(), c)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, false
	}
	return ctx, true
}

// export turns a finished trace into Triton's spans: InferRequest (the
// root, child of a propagated context), the model's span with the request
// events, and "compute" with the compute events.
func (e *otelExporter) export(t *Trace) {
	if len(t.events) == 0 {
		return
	}
	parent := t.parent
	if parent == nil {
		parent = context.Background()
	}
	first, last := t.events[0].at, t.events[0].at
	for _, ev := range t.events {
		if ev.at.Before(first) {
			first = ev.at
		}
		if ev.at.After(last) {
			last = ev.at
		}
	}
	// The model's span runs from its first event to its last; the
	// frontend's transport timestamps around it belong to the root.
	// (Events are in time order: End sorted them.)
	var mfirst, mlast time.Time
	for _, ev := range t.events {
		if !isFrontend(ev.name) {
			if mfirst.IsZero() {
				mfirst = ev.at
			}
			mlast = ev.at
		}
	}
	if mfirst.IsZero() {
		mfirst, mlast = first, last
	}
	server := trace.WithSpanKind(trace.SpanKindServer)
	rootCtx, root := e.tracer.Start(parent, "InferRequest", server, trace.WithTimestamp(first))
	modelCtx, model := e.tracer.Start(rootCtx, t.model, server, trace.WithTimestamp(mfirst), trace.WithAttributes(
		attribute.String("triton.model_name", t.model),
		attribute.Int64("triton.model_version", t.version),
		attribute.Int64("triton.trace_id", int64(t.id)),
		attribute.Int64("triton.trace_parent_id", 0),
		attribute.String("triton.request_id", t.request),
	))
	var compute trace.Span
	for _, ev := range t.events {
		switch ev.name {
		case "COMPUTE_START":
			_, compute = e.tracer.Start(modelCtx, "compute", server, trace.WithTimestamp(ev.at))
			compute.AddEvent(ev.name, trace.WithTimestamp(ev.at))
		case "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END":
			if compute != nil {
				compute.AddEvent(ev.name, trace.WithTimestamp(ev.at))
				if ev.name == "COMPUTE_END" {
					compute.End(trace.WithTimestamp(ev.at))
				}
			}
		default:
			if isFrontend(ev.name) {
				root.AddEvent(ev.name, trace.WithTimestamp(ev.at))
			} else {
				model.AddEvent(ev.name, trace.WithTimestamp(ev.at))
			}
		}
	}
	model.End(trace.WithTimestamp(mlast))
	root.End(trace.WithTimestamp(last))
}

// isFrontend tells the HTTP and gRPC frontends' timestamps
// (HTTP_RECV_START, GRPC_SEND_END, ..., and INFER_RESPONSE_COMPLETE, when
// the frontend has the response) from the core's: Triton puts them on the
// root span.
func isFrontend(name string) bool {
	return strings.HasPrefix(name, "HTTP_") || strings.HasPrefix(name, "GRPC_") || name == "INFER_RESPONSE_COMPLETE"
}

func (e *otelExporter) shutdown(ctx context.Context) error {
	return e.provider.Shutdown(ctx)
}
