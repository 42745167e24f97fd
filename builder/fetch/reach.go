package fetch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Reach is the answer of a reachability check: could this source be
// fetched from here now? The checks are cheap (a HEAD request, git
// ls-remote, apt-get --print-uris), download nothing and each is bounded
// by Options.ReachTimeout, so `doctor` can ask before a build of hours
// depends on them.
type Reach struct {
	OK bool
	// Cached: the source cache holds it; no network was asked.
	Cached bool
	// Detail names where the source would come from, or what each way
	// tried answered.
	Detail string
}

func (o Options) reachTimeout() time.Duration {
	if o.ReachTimeout > 0 {
		return o.ReachTimeout
	}
	return 20 * time.Second
}

// ReachURL asks the URLs of spec, in the order FetchURL tries them, until
// one answers: a HEAD request (a GET of the first byte when a server
// refuses HEAD) that gets 200 or 206, or for file URLs a regular file.
// A cached file counts without asking anyone.
func ReachURL(ctx context.Context, spec URLSpec, cache Cache, opts Options) Reach {
	if sha, err := normalizeSHA256(spec.SHA256); err == nil && cache.Has(sha) {
		return Reach{OK: true, Cached: true, Detail: "in the source cache"}
	}
	return reachURLs(ctx, spec.URLs, spec.Size, opts)
}

func reachURLs(ctx context.Context, urls []string, size int64, opts Options) Reach {
	if len(urls) == 0 {
		return Reach{Detail: "no URLs"}
	}
	var failed []string
	for _, s := range urls {
		u, err := url.Parse(s)
		if err == nil {
			err = probeURL(ctx, u, size, opts)
		}
		if err == nil {
			return Reach{OK: true, Detail: "reachable at " + redact(s)}
		}
		failed = append(failed, redact(s)+": "+err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return Reach{Detail: "unreachable: " + strings.Join(failed, "; ")}
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// probeURL asks one URL whether it holds the file, without downloading it.
func probeURL(ctx context.Context, u *url.URL, size int64, opts Options) error {
	switch u.Scheme {
	case "file":
		fi, err := os.Stat(u.Path)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", u.Path)
		}
		return nil
	case "http", "https":
	default:
		return fmt.Errorf("unsupported scheme %q", u.Scheme)
	}
	ask := func(method string) (*http.Response, error) {
		rctx, cancel := context.WithTimeout(ctx, opts.reachTimeout())
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, method, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("User-Agent", UserAgent)
		req.Header.Set("Accept-Encoding", "identity")
		if method == http.MethodGet {
			req.Header.Set("Range", "bytes=0-0")
		}
		resp, err := opts.client().Do(req)
		if err != nil {
			if errors.Is(rctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("no answer within %s", opts.reachTimeout())
			}
			return nil, err
		}
		// At most the one byte asked for; the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10)) // lets the connection be reused; the status is the answer
		resp.Body.Close()
		return resp, nil
	}
	resp, err := ask(http.MethodHead)
	if err == nil && (resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented || resp.StatusCode == http.StatusForbidden) {
		resp, err = ask(http.MethodGet)
	}
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent:
	default:
		return fmt.Errorf("%s", resp.Status)
	}
	if size > 0 && resp.StatusCode == http.StatusOK && resp.ContentLength > 0 && resp.ContentLength != size {
		return fmt.Errorf("serves %d bytes, want %d", resp.ContentLength, size)
	}
	return nil
}

// ReachGit asks the repository for the pinned tag with git ls-remote and
// checks that it still names the pinned commit. Without a tag it only
// checks that the repository answers. A cached checkout counts without
// asking.
func ReachGit(ctx context.Context, spec GitSpec, cache Cache, opts Options) Reach {
	if fi, err := os.Stat(gitCachePath(cache, spec)); err == nil && fi.Mode().IsRegular() {
		return Reach{OK: true, Cached: true, Detail: "in the source cache"}
	}
	if strings.HasPrefix(spec.URL, "-") || strings.HasPrefix(spec.Tag, "-") {
		return Reach{Detail: "URL and tag must not start with '-'"}
	}
	rctx, cancel := context.WithTimeout(ctx, opts.reachTimeout())
	defer cancel()
	args := []string{"ls-remote", "--", spec.URL}
	if spec.Tag != "" {
		args = append(args, "refs/tags/"+spec.Tag, "refs/tags/"+spec.Tag+"^{}")
	}
	out, err := gitRunner{opts: opts}.run(rctx, "", args...)
	if err != nil {
		if errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return Reach{Detail: fmt.Sprintf("git ls-remote %s: no answer within %s", spec.URL, opts.reachTimeout())}
		}
		return Reach{Detail: "unreachable: " + err.Error()}
	}
	if spec.Tag == "" {
		return Reach{OK: true, Detail: "repository " + spec.URL + " answers"}
	}
	// An annotated tag lists its tag object and, peeled (^{}), the commit.
	var direct, peeled string
	for _, line := range strings.Split(out, "\n") {
		id, ref, ok := strings.Cut(strings.TrimSpace(line), "\t")
		switch {
		case !ok:
		case ref == "refs/tags/"+spec.Tag+"^{}":
			peeled = id
		case ref == "refs/tags/"+spec.Tag:
			direct = id
		}
	}
	got := firstNonEmpty(peeled, direct)
	switch {
	case got == "":
		return Reach{Detail: fmt.Sprintf("%s has no tag %s", spec.URL, spec.Tag)}
	case got != strings.ToLower(spec.Commit):
		return Reach{Detail: fmt.Sprintf("%s: tag %s is at %s, the recipe pins %s", spec.URL, spec.Tag, got, spec.Commit)}
	}
	return Reach{OK: true, Detail: fmt.Sprintf("%s has tag %s at the pinned commit", spec.URL, spec.Tag)}
}

// ReachApt asks apt, through the same private configuration FetchApt uses,
// where it would download the source package from (apt-get source
// --print-uris, after an apt-get update when the lists are missing or
// stale), checks that the archive's sha256 of spec.File is the pinned
// one, and asks that URL as ReachURL does. Only spec.File matters: a
// mirror may lack the package's other files.
func ReachApt(ctx context.Context, spec AptSpec, cache Cache, opts Options) Reach {
	sha, err := normalizeSHA256(spec.SHA256)
	if err != nil {
		return Reach{Detail: err.Error()}
	}
	if cache.Has(sha) {
		return Reach{OK: true, Cached: true, Detail: "in the source cache"}
	}
	id := spec.Package + "=" + spec.Version
	a, err := newAptEnv(cache, opts)
	if err != nil {
		return Reach{Detail: err.Error()}
	}
	unlock, err := cache.Lock(ctx, "apt")
	if err != nil {
		return Reach{Detail: err.Error()}
	}
	defer unlock()
	// An update downloads the archive's source indexes (tens of MB):
	// bounded, but more generously than one request.
	uctx, cancel := context.WithTimeout(ctx, 10*opts.reachTimeout())
	defer cancel()
	updated, err := a.ensureLists(uctx)
	if err != nil {
		return Reach{Detail: "apt-get update: " + err.Error()}
	}
	uris, err := a.printURIs(uctx, id)
	if err != nil && !updated {
		if err = a.update(uctx); err == nil {
			uris, err = a.printURIs(uctx, id)
		}
	}
	if err != nil {
		return Reach{Detail: err.Error()}
	}
	u, ok := uris[spec.File]
	if !ok {
		return Reach{Detail: fmt.Sprintf("apt source package %s has no file %s", id, spec.File)}
	}
	if u.sha256 != "" && u.sha256 != sha {
		return Reach{Detail: fmt.Sprintf("the archive's %s has sha256 %s, the recipe pins %s", spec.File, u.sha256, sha)}
	}
	r := reachURLs(ctx, []string{u.uri}, u.size, opts)
	if r.OK {
		r.Detail = fmt.Sprintf("apt source package %s: %s", id, r.Detail)
	}
	return r
}

type aptURI struct {
	uri    string
	size   int64
	sha256 string
}

// printURIs lists the files of a source package as apt would download
// them: lines of `'URI' FILE SIZE SHA256:HEX`.
func (a *aptEnv) printURIs(ctx context.Context, id string) (map[string]aptURI, error) {
	out, err := a.run(ctx, a.dir, "source", "--print-uris", "--only-source", id)
	if err != nil {
		return nil, err
	}
	files := map[string]aptURI{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.HasPrefix(f[0], "'") || !strings.HasSuffix(f[0], "'") {
			continue
		}
		u := aptURI{uri: strings.Trim(f[0], "'")}
		u.size, _ = strconv.ParseInt(f[2], 10, 64)
		for _, h := range f[3:] {
			if v, ok := strings.CutPrefix(h, "SHA256:"); ok {
				u.sha256 = strings.ToLower(v)
			}
		}
		name := f[1]
		if name == "" {
			name = path.Base(u.uri)
		}
		files[name] = u
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("apt-get source --print-uris %s listed no files", id)
	}
	return files, nil
}

// gitCachePath is where FetchGit keeps the checkout spec pins.
func gitCachePath(cache Cache, spec GitSpec) string {
	key := strings.ToLower(spec.Commit)
	if spec.Submodules {
		key += "+submodules"
	}
	return filepath.Join(cache.Dir, "git", key+".tar")
}
