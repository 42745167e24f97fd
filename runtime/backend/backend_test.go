package backend

import (
	"bytes"
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
