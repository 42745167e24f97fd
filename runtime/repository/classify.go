package repository

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// maxLabelFile bounds a label_filename file: labels are read into memory
// when the model loads.
const maxLabelFile = 16 << 20

// loadLabels reads the label_filename files of cfg's outputs (one label
// per line, the line number being the class index), resolved inside the
// model directory dir: a name that leaves it, also through a symlink, is
// refused, as is a file over maxLabelFile.
func loadLabels(dir string, outputs []*modelconfig.ModelOutput) (map[string][]string, error) {
	var out map[string][]string
	for _, o := range outputs {
		name := o.GetLabelFilename()
		if name == "" {
			continue
		}
		p, err := insideModelDir(dir, name)
		if err != nil {
			return nil, fmt.Errorf("output '%s' label_filename: %w", o.GetName(), err)
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("output '%s' label_filename '%s': %w", o.GetName(), name, err)
		}
		fi, err := f.Stat()
		if err == nil && (!fi.Mode().IsRegular() || fi.Size() > maxLabelFile) {
			err = fmt.Errorf("not a regular file of at most %d bytes", maxLabelFile)
		}
		var labels []string
		if err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 0, 4096), maxLabelFile)
			for sc.Scan() {
				labels = append(labels, strings.TrimRight(sc.Text(), "\r"))
			}
			err = sc.Err()
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("output '%s' label_filename '%s': %w", o.GetName(), name, err)
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[o.GetName()] = labels
	}
	return out, nil
}

// insideModelDir resolves name (relative to the model directory dir) and
// checks that, symlinks followed, it stays inside dir.
func insideModelDir(dir, name string) (string, error) {
	if filepath.IsAbs(name) {
		return "", fmt.Errorf("'%s' must be relative to the model directory", name)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	p, err := filepath.EvalSymlinks(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("'%s': %w", name, err)
	}
	if rel, err := filepath.Rel(root, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("'%s' is outside the model directory", name)
	}
	return p, nil
}

// Labels returns the class labels of output name (nil without a
// label_filename).
func (m *Model) Labels(name string) []string { return m.labels[name] }

// Classify turns output t into Triton's classification result for count
// classes: a BYTES tensor of "value:index[:label]" strings, the count
// highest-valued elements of each batch row (of the whole tensor for a
// model that does not batch) in descending order, ties by index, shaped
// [rows, k] or [k] with k = min(count, elements per row). Values are
// printed as C++'s std::to_string prints them, as Triton does ("3.300000"
// for floats).
func (m *Model) Classify(t *backend.Tensor, count int) (backend.Tensor, error) {
	size := t.DataType.Size()
	switch t.DataType {
	case backend.Bytes, backend.Bool, backend.FP16, backend.BF16, "":
		return backend.Tensor{}, backend.Errorf(backend.InvalidArg, "class result not available for output '%s' due to unsupported type '%s'", t.Name, t.DataType)
	}
	if count < 1 {
		return backend.Tensor{}, backend.Errorf(backend.InvalidArg, "classification count for output '%s' must be positive, got %d", t.Name, count)
	}
	rows, per := int64(1), t.NumElements()
	batched := m.Spec.MaxBatchSize > 0 && len(t.Shape) > 0
	if batched {
		rows = t.Shape[0]
		per = 1
		for _, d := range t.Shape[1:] {
			per *= d
		}
	}
	if rows < 0 || per < 0 || rows*per*int64(size) != int64(len(t.Data)) {
		return backend.Tensor{}, backend.Errorf(backend.Internal, "output '%s' of model '%s' has %d bytes for shape %s", t.Name, m.Name, len(t.Data), FormatShape(t.Shape))
	}
	k := min(int64(count), per)
	labels := m.labels[t.Name]
	value := func(i int64) (float64, string) {
		b := t.Data[i*int64(size):]
		switch t.DataType {
		case backend.FP32:
			v := math.Float32frombits(binary.LittleEndian.Uint32(b))
			return float64(v), strconv.FormatFloat(float64(v), 'f', 6, 32)
		case backend.FP64:
			v := math.Float64frombits(binary.LittleEndian.Uint64(b))
			return v, strconv.FormatFloat(v, 'f', 6, 64)
		case backend.Uint8, backend.Uint16, backend.Uint32, backend.Uint64:
			var v uint64
			switch size {
			case 1:
				v = uint64(b[0])
			case 2:
				v = uint64(binary.LittleEndian.Uint16(b))
			case 4:
				v = uint64(binary.LittleEndian.Uint32(b))
			default:
				v = binary.LittleEndian.Uint64(b)
			}
			return float64(v), strconv.FormatUint(v, 10)
		}
		var v int64
		switch size {
		case 1:
			v = int64(int8(b[0]))
		case 2:
			v = int64(int16(binary.LittleEndian.Uint16(b)))
		case 4:
			v = int64(int32(binary.LittleEndian.Uint32(b)))
		default:
			v = int64(binary.LittleEndian.Uint64(b))
		}
		return float64(v), strconv.FormatInt(v, 10)
	}
	var data []byte
	idx := make([]int64, per)
	vals := make([]float64, per)
	for r := int64(0); r < rows; r++ {
		for i := range idx {
			idx[i] = int64(i)
			vals[i], _ = value(r*per + int64(i))
		}
		slices.SortStableFunc(idx, func(a, b int64) int {
			switch {
			case vals[a] > vals[b]:
				return -1
			case vals[a] < vals[b]:
				return 1
			}
			return 0
		})
		for _, i := range idx[:k] {
			_, text := value(r*per + i)
			s := text + ":" + strconv.FormatInt(i, 10)
			if i < int64(len(labels)) {
				s += ":" + labels[i]
			}
			data = binary.LittleEndian.AppendUint32(data, uint32(len(s)))
			data = append(data, s...)
		}
	}
	shape := []int64{k}
	if batched {
		shape = []int64{rows, k}
	}
	return backend.Tensor{Name: t.Name, DataType: backend.Bytes, Shape: shape, Data: data}, nil
}
