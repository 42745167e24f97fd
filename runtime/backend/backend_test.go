package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"testing"
)

func TestAppendUint(t *testing.T) {
	for _, c := range []struct {
		dt   DataType
		v    uint64
		want []byte
	}{
		{Uint8, 0x1ff, []byte{0xff}},
		{Int16, uint64(0x0102), []byte{0x02, 0x01}},
		{Int32, uint64(1<<64 - 2), []byte{0xfe, 0xff, 0xff, 0xff}}, // int32(-2)
		{Uint32, 0x0a0b0c0d, []byte{0x0d, 0x0c, 0x0b, 0x0a}},
		{Int64, 1, []byte{1, 0, 0, 0, 0, 0, 0, 0}},
	} {
		got := c.dt.AppendUint([]byte{0xaa}, c.v)
		if want := append([]byte{0xaa}, c.want...); !bytes.Equal(got, want) {
			t.Errorf("%s.AppendUint(%#x) = %x, want %x", c.dt, c.v, got, want)
		}
	}
}

func TestErrorKeepsItsCause(t *testing.T) {
	_, statErr := os.Stat("/nonexistent/model.pt")
	err := Errorf(NotFound, "model %q: %w", "m", statErr)
	if err.Error() != `model "m": `+statErr.Error() {
		t.Errorf("message %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != "/nonexistent/model.pt" {
		t.Errorf("errors.As(*fs.PathError) through %v: %v", err, pe)
	}
	if !errors.Is(err.Unwrap(), statErr) {
		t.Errorf("Unwrap = %v, want the stat error", errors.Unwrap(err))
	}

	// Several %w operands are all causes; %v keeps only the text.
	both := Errorf(Internal, "%w and %w", context.Canceled, io.EOF)
	if !errors.Is(both, context.Canceled) || !errors.Is(both, io.EOF) {
		t.Errorf("%v does not wrap both causes", both)
	}
	if flat := Errorf(Internal, "x: %v", context.Canceled); flat.Unwrap() != nil || errors.Is(flat, context.Canceled) {
		t.Errorf("%%v must not wrap: %#v", flat)
	}

	// An *Error further down a chain is still found, with its code.
	var be *Error
	if outer := fmt.Errorf("loading: %w", err); !errors.As(outer, &be) || be.Code != NotFound || !errors.Is(outer, fs.ErrNotExist) {
		t.Errorf("through fmt.Errorf: %v", outer)
	}
}
