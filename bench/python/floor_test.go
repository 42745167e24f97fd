package main

import (
	"reflect"
	"testing"
	"time"
	"unsafe"
)

func TestBestBatch(t *testing.T) {
	for _, c := range []struct{ conc, max, want int }{
		{1, 32, 1}, {2, 32, 1}, {16, 32, 8}, {17, 32, 8}, {128, 32, 32}, {16, 4, 4},
	} {
		if got := bestBatch(c.conc, c.max); got != c.want {
			t.Errorf("bestBatch(%d, %d) = %d, want %d", c.conc, c.max, got, c.want)
		}
	}
}

func TestFloorLatency(t *testing.T) {
	us := time.Microsecond
	// 16 clients, batches of 8 taking 96 us in the loop (12 us a request),
	// 10 us of server CPU a request, 2 cores and 4 stubs: 16 * 22 / 2 =
	// 176 us.
	if got := floorLatency(16, 8, 96*us, 10*us, 5*us, 2, 4); got != 176*us {
		t.Errorf("throughput-bound floor = %v, want 176us", got)
	}
	// The same with one stub: its batches run one at a time, so 16 * 12
	// us of stub work a request on one CPU bounds it: 192 us.
	if got := floorLatency(16, 8, 96*us, 10*us, 5*us, 2, 1); got != 192*us {
		t.Errorf("floor with one stub = %v, want 192us", got)
	}
	// One client: the batch's own loop plus the pytorch p50 is the bound.
	if got := floorLatency(1, 1, 14*us, 10*us, 7*us, 2, 4); got != 21*us {
		t.Errorf("latency-bound floor = %v, want 21us", got)
	}
	// A core count of 0 (unknown) counts as one.
	if got := floorLatency(4, 1, 10*us, 10*us, 0, 0, 4); got != 80*us {
		t.Errorf("floor with no cores = %v, want 80us", got)
	}
}

// TestMedianKeepsEveryField: a field median leaves out reads as zero in
// the summary (an execute time of zero would lower the model.py floor
// without a word), so every field of three results must come through.
func TestMedianKeepsEveryField(t *testing.T) {
	var rs []result
	for k := 1; k <= 3; k++ {
		r := result{}
		v := reflect.ValueOf(&r).Elem()
		for i := 0; i < v.NumField(); i++ {
			// The fields are unexported: reach them through their address.
			f := v.Field(i)
			f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			switch f.Kind() {
			case reflect.Int64, reflect.Int:
				f.SetInt(int64(k) * 1000)
			case reflect.Float64:
				f.SetFloat(float64(k))
			default:
				t.Fatalf("result.%s: a field of kind %s, which this test does not fill", v.Type().Field(i).Name, f.Kind())
			}
		}
		rs = append(rs, r)
	}
	m := reflect.ValueOf(median(rs))
	for i := 0; i < m.NumField(); i++ {
		if m.Field(i).IsZero() {
			t.Errorf("median leaves result.%s out", m.Type().Field(i).Name)
		}
	}
}
