package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// URLSpec names one file by digest and the places it can be downloaded from.
type URLSpec struct {
	// URLs are tried in this order; callers put mirrors first and the
	// upstream location last. Schemes: http, https, file.
	URLs []string
	// SHA256 is the pinned digest of the file (64 hex digits).
	SHA256 string
	// Filename names the file in messages and progress. Default: the last
	// path element of the first URL.
	Filename string
	// Size, when positive, is the expected length in bytes. It gives
	// progress a total when a server sends none and stops a server that
	// streams more than that.
	Size int64
}

// FetchURL returns the cache path of the file spec pins, downloading it when
// it is not cached yet. A cached file is returned without any network
// access. Each URL is tried Options.Attempts times, resuming an interrupted
// transfer with an HTTP Range request, before the next URL is tried. The
// digest is checked before the file enters the cache; on a mismatch the
// bytes are deleted and the error wraps a *ChecksumError.
func FetchURL(ctx context.Context, spec URLSpec, cache Cache, opts Options) (string, error) {
	sha, err := normalizeSHA256(spec.SHA256)
	if err != nil {
		return "", fmt.Errorf("url source %q: %w", spec.Filename, err)
	}
	if len(spec.URLs) == 0 {
		return "", fmt.Errorf("url source %q (sha256 %s): no URLs", spec.Filename, sha)
	}
	urls := make([]*url.URL, 0, len(spec.URLs))
	for _, s := range spec.URLs {
		u, err := url.Parse(s)
		if err != nil {
			return "", fmt.Errorf("url source %q: %w", spec.Filename, err)
		}
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" {
				return "", fmt.Errorf("url source %q: %q has no host", spec.Filename, s)
			}
		case "file":
			if u.Path == "" {
				return "", fmt.Errorf("url source %q: %q has no path", spec.Filename, s)
			}
		default:
			return "", fmt.Errorf("url source %q: unsupported scheme in %q (want http, https or file)", spec.Filename, s)
		}
		urls = append(urls, u)
	}
	name := spec.Filename
	if name == "" {
		name = path.Base(urls[0].Path)
		if name == "." || name == "/" {
			name = "sha256:" + sha[:12]
		}
	}

	if cache.Has(sha) {
		return cache.Path(sha), nil
	}
	unlock, err := cache.Lock(ctx, sha)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another process may have finished the same file while we waited.
	if cache.Has(sha) {
		return cache.Path(sha), nil
	}

	d := &download{name: name, sha: sha, size: spec.Size, cache: cache, opts: opts}
	var errs []error
	for i, u := range urls {
		p, err := d.fromURL(ctx, u)
		if err == nil {
			opts.report(Update{Name: name, Done: true})
			return p, nil
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("fetching %s: %w", name, err)
			opts.report(Update{Name: name, Done: true, Error: err})
			return "", err
		}
		errs = append(errs, err)
		if i+1 < len(urls) {
			fmt.Fprintf(opts.log(), "fetching %s: %v; trying %s\n", name, err, urls[i+1].Redacted())
		}
	}
	// A non-empty partial file stays for the next run to resume; an empty
	// one is only litter.
	if fi, serr := os.Stat(cache.partPath(sha)); serr == nil && fi.Size() == 0 {
		os.Remove(cache.partPath(sha))
	}
	err = fmt.Errorf("fetching %s (sha256 %s): every source failed: %w", name, sha, errors.Join(errs...))
	opts.report(Update{Name: name, Done: true, Error: err})
	return "", err
}

// download is the state of fetching one digest; the partial file it writes
// survives failed attempts so that the next one resumes.
type download struct {
	name  string
	sha   string
	size  int64
	cache Cache
	opts  Options

	// resumed is set when the bytes on disk came from more than one
	// request, so a mismatch might be a splice of two different files
	// rather than a bad server.
	resumed bool
}

// fromURL tries one URL with retries and returns the cache path.
func (d *download) fromURL(ctx context.Context, u *url.URL) (string, error) {
	attempts := d.opts.attempts()
	var last error
	for a := 0; a < attempts; a++ {
		if a > 0 {
			wait := d.opts.backoff(a - 1)
			fmt.Fprintf(d.opts.log(), "fetching %s from %s: %v; retry %d/%d in %v\n",
				d.name, u.Redacted(), last, a, attempts-1, wait)
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(wait):
			}
		}
		h, err := d.transfer(ctx, u)
		if err == nil {
			got := hex.EncodeToString(h.Sum(nil))
			if got == d.sha {
				return d.cache.Adopt(ctx, d.sha, d.cache.partPath(d.sha), u.Redacted())
			}
			os.Remove(d.cache.partPath(d.sha))
			cerr := &ChecksumError{URL: u.Redacted(), Want: d.sha, Got: got}
			if d.resumed {
				// Retry once from zero before blaming this URL.
				d.resumed = false
				last = cerr
				continue
			}
			return "", cerr
		}
		last = err
		if ctx.Err() != nil || isPermanent(err) {
			return "", err
		}
	}
	return "", last
}

// permanentError marks a failure that the same URL will repeat.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func isPermanent(err error) bool {
	var p permanentError
	if errors.As(err, &p) {
		return true
	}
	var s *StatusError
	return errors.As(err, &s) && s.permanent()
}

var errStalled = errors.New("no data received within the stall timeout")

// transfer completes the partial file from u and returns the hash of its
// whole content.
func (d *download) transfer(ctx context.Context, u *url.URL) (hash.Hash, error) {
	part := d.cache.partPath(d.sha)
	if err := d.cache.prepare(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("partial file: %w", err)
	}
	defer f.Close()

	if u.Scheme == "file" {
		return d.copyLocal(ctx, f, u)
	}

	h := sha256.New()
	offset, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return nil, fmt.Errorf("reading partial file: %w", err)
	}
	if d.size > 0 && offset > d.size {
		if err := restart(f, h); err != nil {
			return nil, err
		}
		offset = 0
	}

	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(d.opts.stallTimeout(), func() { cancel(errStalled) })
	defer stall.Stop()

	req, err := http.NewRequestWithContext(actx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, permanentError{err}
	}
	req.Header.Set("User-Agent", UserAgent)
	// Ask for the bytes as stored: with transparent gzip the offsets of a
	// Range request would not match the file.
	req.Header.Set("Accept-Encoding", "identity")
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := d.opts.client().Do(req)
	if err != nil {
		return nil, stallCause(actx, err)
	}
	defer resp.Body.Close()

	var total int64
	switch resp.StatusCode {
	case http.StatusOK:
		if offset > 0 {
			fmt.Fprintf(d.opts.log(), "fetching %s: %s ignored the Range request; starting over\n", d.name, u.Redacted())
			if err := restart(f, h); err != nil {
				return nil, err
			}
			offset = 0
		}
		total = resp.ContentLength
	case http.StatusPartialContent:
		start, size, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != offset {
			// A range we did not ask for: drop what we have so that the
			// next attempt asks for the whole file.
			if err := restart(f, h); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("GET %s: unexpected Content-Range %q for offset %d", u.Redacted(), resp.Header.Get("Content-Range"), offset)
		}
		d.resumed = true
		total = size
	case http.StatusRequestedRangeNotSatisfiable:
		// The partial file may already be complete: "bytes */SIZE".
		if _, size, ok := parseContentRange(resp.Header.Get("Content-Range")); ok && size == offset {
			d.resumed = true
			return h, nil
		}
		if err := restart(f, h); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("GET %s: range from byte %d not satisfiable; discarded the partial file", u.Redacted(), offset)
	default:
		return nil, &StatusError{URL: u.Redacted(), Status: resp.Status, Code: resp.StatusCode}
	}
	if total < 0 && d.size > 0 {
		total = d.size
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("partial file: %w", err)
	}

	done := offset
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			stall.Reset(d.opts.stallTimeout())
			if _, err := f.Write(buf[:n]); err != nil {
				return nil, permanentError{fmt.Errorf("writing partial file: %w", err)}
			}
			h.Write(buf[:n])
			done += int64(n)
			if d.size > 0 && done > d.size {
				if err := restart(f, h); err != nil {
					return nil, err
				}
				return nil, permanentError{fmt.Errorf("GET %s: more than the expected %d bytes", u.Redacted(), d.size)}
			}
			d.opts.report(Update{Name: d.name, Complete: done, Total: total})
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("GET %s: after %d bytes: %w", u.Redacted(), done, stallCause(actx, rerr))
		}
	}
	if total >= 0 && done != total {
		return nil, fmt.Errorf("GET %s: got %d of %d bytes", u.Redacted(), done, total)
	}
	return h, nil
}

// copyLocal copies a file:// source into the partial file from the start:
// a local copy has nothing to resume.
func (d *download) copyLocal(ctx context.Context, f *os.File, u *url.URL) (hash.Hash, error) {
	h := sha256.New()
	if err := restart(f, h); err != nil {
		return nil, err
	}
	src, err := os.Open(u.Path)
	if err != nil {
		return nil, permanentError{err}
	}
	defer src.Close()
	total := int64(-1)
	if fi, err := src.Stat(); err == nil {
		if !fi.Mode().IsRegular() {
			return nil, permanentError{fmt.Errorf("%s is not a regular file", u.Path)}
		}
		total = fi.Size()
	}
	if d.size > 0 && total > d.size {
		return nil, permanentError{fmt.Errorf("%s has %d bytes, more than the expected %d", u.Path, total, d.size)}
	}
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, src})
	if err != nil {
		return nil, fmt.Errorf("copying %s: %w", u.Path, err)
	}
	d.opts.report(Update{Name: d.name, Complete: n, Total: total})
	return h, nil
}

// restart empties the partial file and the running hash.
func restart(f *os.File, h hash.Hash) error {
	h.Reset()
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("partial file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("partial file: %w", err)
	}
	return nil
}

// stallCause replaces the bare "context canceled" of a stalled attempt with
// the reason.
func stallCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errStalled) {
		return errStalled
	}
	return err
}

// parseContentRange reads "bytes START-END/SIZE" or "bytes */SIZE". size is
// -1 when the server wrote "*" for it; start is -1 for the second form.
func parseContentRange(s string) (start, size int64, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, sz, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	size = -1
	if sz != "*" {
		v, err := strconv.ParseInt(sz, 10, 64)
		if err != nil || v < 0 {
			return 0, 0, false
		}
		size = v
	}
	if rng == "*" {
		return -1, size, true
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first {
		return 0, 0, false
	}
	return first, size, true
}
