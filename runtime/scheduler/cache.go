package scheduler

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
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
// read-only.
func share(r *backend.Response) *backend.Response {
	out := &backend.Response{Outputs: slices.Clone(r.Outputs), Parameters: maps.Clone(r.Parameters)}
	for i := range out.Outputs {
		out.Outputs[i].Shape = slices.Clone(out.Outputs[i].Shape)
	}
	return out
}

// requestKey digests what decides a request's response: the model and
// version, its inputs in name order (name, datatype, shape, data), its
// requested outputs and its parameters. Every field is length-prefixed,
// so no two different requests encode alike.
func requestKey(model string, version int64, req *backend.Request) cacheKey {
	h := sha256.New()
	var num [8]byte
	u := func(v uint64) {
		binary.LittleEndian.PutUint64(num[:], v)
		h.Write(num[:])
	}
	str := func(s string) {
		u(uint64(len(s)))
		h.Write([]byte(s))
	}
	str(model)
	u(uint64(version))
	order := make([]int, len(req.Inputs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return req.Inputs[order[a]].Name < req.Inputs[order[b]].Name })
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
		h.Write(t.Data)
	}
	outs := slices.Clone(req.Outputs)
	slices.Sort(outs)
	u(uint64(len(outs)))
	for _, o := range outs {
		str(o)
	}
	keys := slices.Sorted(maps.Keys(req.Parameters))
	u(uint64(len(keys)))
	for _, k := range keys {
		str(k)
		switch v := req.Parameters[k].(type) {
		case string:
			h.Write([]byte{'s'})
			str(v)
		case int64:
			h.Write([]byte{'i'})
			u(uint64(v))
		case uint64:
			h.Write([]byte{'u'})
			u(v)
		case bool:
			h.Write([]byte{'b'})
			if v {
				u(1)
			} else {
				u(0)
			}
		case float64:
			h.Write([]byte{'f'})
			u(math.Float64bits(v))
		default:
			h.Write([]byte{'?'})
			str(fmt.Sprint(v))
		}
	}
	var k cacheKey
	h.Sum(k[:0])
	return k
}

// inferCached answers req from the cache, or runs it and caches a
// successful response. Hits count as successes (with the lookup as their
// cache_hit time) but not as inferences or executions, as on Triton;
// misses add the lookup and insertion time to cache_miss.
func (s *Scheduler) inferCached(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	start := time.Now()
	k := requestKey(s.cfg.Name, s.cfg.Version, req)
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
