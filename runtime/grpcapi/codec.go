package grpcapi

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protov2 "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// Bounds on what one inference request message may make the server
// allocate while it is decoded, before any validation sees it. An element
// of a repeated message or map costs two bytes on the wire and a Go struct
// of about a hundred bytes decoded, so a 64 MiB message of empty input
// tensors held gigabytes; an element of a repeated bytes field (a BYTES
// tensor's strings, raw_input_contents) costs a 24-byte slice header. No
// model takes as many tensors and parameters as maxRequestMessages allows
// (the HTTP frontend bounds tensors at 16,384), and maxRequestStrings
// leaves a BYTES input of four million strings.
const (
	maxRequestMessages = 1 << 16
	maxRequestStrings  = 1 << 22
)

// inferCodec is grpc-go's proto codec, with ModelInferRequest messages
// counted before they are decoded: one over the bounds above is refused
// without being built. Other messages go to the proto codec as they are.
type inferCodec struct {
	encoding.CodecV2
	plan *wirePlan // ModelInferRequest's
}

func newInferCodec() inferCodec {
	return inferCodec{
		CodecV2: encoding.GetCodecV2(proto.Name),
		plan:    newWirePlan((*pb.ModelInferRequest)(nil).ProtoReflect().Descriptor(), map[protoreflect.FullName]*wirePlan{}),
	}
}

// Unmarshal decodes data into v, refusing an inference request over the
// bounds.
func (c inferCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*pb.ModelInferRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	// As the proto codec does: one contiguous buffer (pooled when the
	// message came in several), which the count reads too.
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	var n elementCount
	if err := n.count(b, c.plan); err != nil {
		return err
	}
	return protov2.Unmarshal(b, m)
}

// wirePlan says, per field number of a message type, what an occurrence
// of the field costs decoded: a table rather than the descriptor's
// lookups, which took as long as a tenth of the request's decoding.
type wirePlan struct {
	fields []fieldPlan // by field number
}

type fieldPlan struct {
	msg     *wirePlan // a message (or map entry) of this plan
	strings bool      // an element of a repeated bytes or string field
}

// newWirePlan builds md's plan; seen holds the plans being built, for a
// message type that contains itself.
func newWirePlan(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]*wirePlan) *wirePlan {
	if p, ok := seen[md.FullName()]; ok {
		return p
	}
	p := &wirePlan{}
	seen[md.FullName()] = p
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		num := int(fd.Number())
		if num > 64 {
			continue // not in this schema; such a field is not counted
		}
		for len(p.fields) <= num {
			p.fields = append(p.fields, fieldPlan{})
		}
		switch fd.Kind() {
		case protoreflect.MessageKind:
			p.fields[num].msg = newWirePlan(fd.Message(), seen)
		case protoreflect.BytesKind, protoreflect.StringKind:
			p.fields[num].strings = fd.IsList()
		}
	}
	return p
}

// elementCount counts, over a message's wire form, the elements that
// cost an allocation each when it is decoded.
type elementCount struct {
	messages, strings int
}

// count walks b, a message of plan p, and its nested messages. Malformed
// input is left to the decoder, which reports it.
func (n *elementCount) count(b []byte, p *wirePlan) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return nil
		}
		value := b[:l]
		b = b[l:]
		if typ != protowire.BytesType || int(num) >= len(p.fields) {
			continue
		}
		switch f := p.fields[num]; {
		case f.msg != nil:
			if n.messages++; n.messages > maxRequestMessages {
				return fmt.Errorf("inference request has more than %d tensors, parameters and contents in all", maxRequestMessages)
			}
			inner, _ := protowire.ConsumeBytes(value)
			if err := n.count(inner, f.msg); err != nil {
				return err
			}
		case f.strings:
			if n.strings++; n.strings > maxRequestStrings {
				return fmt.Errorf("inference request has more than %d BYTES elements and raw contents in all", maxRequestStrings)
			}
		}
	}
	return nil
}
