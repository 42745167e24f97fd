package scheduler

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Cache is Triton's response cache (--cache-config local,size=BYTES): the
// responses of successful requests, keyed by model name, version and the
// request's inputs (name, datatype, shape, data), requested outputs and
// parameters, shared by every model that enables response_cache. It holds
// at most its size in bytes and evicts the least recently used responses
// to make room. It is safe for concurrent use.
//
// Keys are SHA-256 digests rather than Triton's 64-bit hash, so two
// different requests never share an answer in practice.
type Cache struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	entries map[cacheKey]*list.Element
	lru     list.List // front: most recently used; values are *cacheEntry
	evicted uint64
	scratch sync.Pool // *keyScratch
}

type cacheKey [sha256.Size]byte

type cacheEntry struct {
	key  cacheKey
	resp backend.Response // owned by the cache, never handed out as is
	size int64
}

// entryOverhead is what an entry costs beyond its tensors' bytes (the
// map slot, list element, key and tensor headers), counted against the
// size so that many tiny responses cannot grow the cache past it.
const entryOverhead = 256

// NewCache returns a cache of size bytes (at least 1).
func NewCache(size int64) (*Cache, error) {
	if size < 1 {
		return nil, fmt.Errorf("response cache size %d must be at least 1 byte", size)
	}
	return &Cache{limit: size, entries: map[cacheKey]*list.Element{}}, nil
}

// CacheStats is a snapshot of the cache as a whole.
type CacheStats struct {
	Entries   int
	Used      int64 // bytes, as counted against the size
	Size      int64
	Evictions uint64
}

// Stats returns the cache's occupancy.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Entries: len(c.entries), Used: c.used, Size: c.limit, Evictions: c.evicted}
}

// lookup returns a copy of the response cached under k.
func (c *Cache) lookup(k cacheKey) (*backend.Response, bool) {
	c.mu.Lock()
	el, ok := c.entries[k]
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	c.lru.MoveToFront(el)
	e := el.Value.(*cacheEntry)
	c.mu.Unlock()
	// An entry is never changed once inserted (eviction only drops it),
	// so it is copied outside the lock.
	return share(&e.resp), true
}

// insert caches a copy of resp under k, evicting the least recently used
// entries for room. A response larger than the whole cache is not cached.
func (c *Cache) insert(k cacheKey, resp *backend.Response) {
	size := int64(entryOverhead)
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		size += int64(len(t.Data)+len(t.Name)) + 8*int64(len(t.Shape))
	}
	if size > c.limit {
		return
	}
	e := &cacheEntry{key: k, resp: deepCopy(resp), size: size}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; ok {
		return // a concurrent miss of the same request got there first
	}
	for c.used+size > c.limit {
		old := c.lru.Back()
		oe := old.Value.(*cacheEntry)
		c.lru.Remove(old)
		delete(c.entries, oe.key)
		c.used -= oe.size
		c.evicted++
	}
	c.entries[k] = c.lru.PushFront(e)
	c.used += size
}

// deepCopy copies resp's outputs and parameters: the backend's buffers are
// the request's, and the frontends may reuse them once it is answered.
func deepCopy(resp *backend.Response) backend.Response {
	out := backend.Response{Outputs: make([]backend.Tensor, len(resp.Outputs)), Parameters: maps.Clone(resp.Parameters)}
	for i, t := range resp.Outputs {
		out.Outputs[i] = backend.Tensor{Name: t.Name, DataType: t.DataType, Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data)}
	}
	return out
}

// share returns a response for one request: its own tensor headers, shapes
// and parameters (callers reshape outputs in place), the cached data shared
// read-only. The usual few small outputs come in one allocation with the
// response: a hit is answered without executing, so what it allocates is
// most of what it costs.
func share(r *backend.Response) *backend.Response {
	dims := 0
	for i := range r.Outputs {
		dims += len(r.Outputs[i].Shape)
	}
	var out *backend.Response
	var shapes []int64
	if len(r.Outputs) <= sharedOutputs && dims <= sharedDims {
		sr := &sharedResponse{}
		out, shapes = &sr.resp, sr.dims[:0]
		out.Outputs = sr.outs[:len(r.Outputs)]
	} else {
		out = &backend.Response{Outputs: make([]backend.Tensor, len(r.Outputs))}
		shapes = make([]int64, 0, dims)
	}
	copy(out.Outputs, r.Outputs)
	out.Parameters = maps.Clone(r.Parameters)
	for i := range out.Outputs {
		t := &out.Outputs[i]
		if t.Shape == nil {
			continue
		}
		n := len(shapes)
		shapes = append(shapes, t.Shape...)
		t.Shape = shapes[n:len(shapes):len(shapes)] // full: an append by the caller copies
	}
	return out
}

// sharedResponse is a response with room for sharedOutputs outputs of
// sharedDims dimensions in all, allocated at once by share.
type sharedResponse struct {
	resp backend.Response
	outs [sharedOutputs]backend.Tensor
	dims [sharedDims]int64
}

const (
	sharedOutputs = 2
	sharedDims    = 8
)

// keyScratch is what requestKey works in, reused through Cache.scratch so
// that a lookup allocates nothing for its key: the digest (sha256.New
// allocates), the encoding of the request's metadata, and the orders its
// inputs, outputs and parameters are sorted into.
type keyScratch struct {
	h     hash.Hash
	buf   []byte
	order []int
	names []string
}

// keyBufFlush is the size from which the metadata encoded so far is
// written to the digest; tensor data of that size or more is written
// straight from the request, not copied.
const keyBufFlush = 512

// requestKey digests what decides a request's response: the model and
// version, its inputs in name order (name, datatype, shape, data), its
// requested outputs and its parameters. Every field is length-prefixed,
// so no two different requests encode alike.
func (c *Cache) requestKey(model string, version int64, req *backend.Request) cacheKey {
	ks, _ := c.scratch.Get().(*keyScratch)
	if ks == nil {
		ks = &keyScratch{h: sha256.New(), buf: make([]byte, 0, 2*keyBufFlush)}
	}
	ks.h.Reset()
	b := ks.buf[:0]
	u := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) {
		u(uint64(len(s)))
		b = append(b, s...)
	}
	raw := func(p []byte) {
		if len(b)+len(p) < keyBufFlush {
			b = append(b, p...)
			return
		}
		ks.h.Write(b)
		ks.h.Write(p)
		b = b[:0]
	}
	str(model)
	u(uint64(version))
	order := ks.order[:0]
	for i := range req.Inputs {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(req.Inputs[a].Name, req.Inputs[b].Name) })
	u(uint64(len(order)))
	for _, i := range order {
		t := &req.Inputs[i]
		str(t.Name)
		str(string(t.DataType))
		u(uint64(len(t.Shape)))
		for _, d := range t.Shape {
			u(uint64(d))
		}
		u(uint64(len(t.Data)))
		raw(t.Data)
	}
	names := append(ks.names[:0], req.Outputs...)
	slices.Sort(names)
	u(uint64(len(names)))
	for _, o := range names {
		str(o)
	}
	names = names[:0]
	for k := range req.Parameters {
		names = append(names, k)
	}
	slices.Sort(names)
	u(uint64(len(names)))
	for _, k := range names {
		str(k)
		switch v := req.Parameters[k].(type) {
		case string:
			b = append(b, 's')
			str(v)
		case int64:
			b = append(b, 'i')
			u(uint64(v))
		case uint64:
			b = append(b, 'u')
			u(v)
		case bool:
			b = append(b, 'b')
			if v {
				u(1)
			} else {
				u(0)
			}
		case float64:
			b = append(b, 'f')
			u(math.Float64bits(v))
		default:
			b = append(b, '?')
			str(fmt.Sprint(v))
		}
	}
	ks.h.Write(b)
	var k cacheKey
	b = ks.h.Sum(b[:0]) // into the scratch: a local array would escape through the interface
	copy(k[:], b)
	// What grew stays for the next request, up to a bound: one huge
	// request must not pin its size in every pooled scratch.
	if cap(b) <= 64*keyBufFlush {
		ks.buf = b[:0]
	}
	clear(names[:cap(names)])
	if cap(names) <= 1024 {
		ks.names, ks.order = names[:0], order[:0]
	} else {
		ks.names, ks.order = nil, nil
	}
	c.scratch.Put(ks)
	return k
}

// inferCached answers req from the cache, or runs it and caches a
// successful response. Hits count as successes (with the lookup as their
// cache_hit time) but not as inferences or executions, as on Triton;
// misses add the lookup and insertion time to cache_miss.
func (s *Scheduler) inferCached(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	start := time.Now()
	k := s.cfg.Cache.requestKey(s.cfg.Name, s.cfg.Version, req)
	if resp, ok := s.cfg.Cache.lookup(k); ok {
		now := time.Now()
		s.stats.cacheHit.add(now.Sub(start))
		s.stats.queue.add(0)
		s.stats.success.add(now.Sub(start))
		s.stats.last.Store(now.UnixMilli())
		return resp, nil
	}
	lookup := time.Since(start)
	resp, err := s.infer(ctx, req)
	if err != nil || resp.Err != nil {
		return resp, err
	}
	ins := time.Now()
	s.cfg.Cache.insert(k, resp)
	s.stats.cacheMiss.add(lookup + time.Since(ins))
	return resp, nil
}
