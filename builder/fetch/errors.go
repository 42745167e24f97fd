package fetch

import "fmt"

// ChecksumError reports content whose sha256 is not the pinned one. The
// offending file has already been deleted when it is returned.
type ChecksumError struct {
	// URL is where the bytes came from: a URL, or for apt sources
	// "apt:PACKAGE=VERSION/FILE".
	URL  string
	Want string
	Got  string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("checksum mismatch for %s: expected sha256 %s, got %s", e.URL, e.Want, e.Got)
}

// CommitError reports a git checkout whose HEAD is not the pinned commit,
// for example a tag that was moved upstream.
type CommitError struct {
	URL  string
	Ref  string
	Want string
	Got  string
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("git %s at %s: expected commit %s, HEAD is %s", e.URL, e.Ref, e.Want, e.Got)
}

// StatusError is an HTTP response that is neither a success nor a partial
// content answer.
type StatusError struct {
	URL    string
	Status string
	Code   int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: %s", e.URL, e.Status)
}

// permanent reports whether retrying the same URL cannot help: the client
// errors other than timeouts and rate limits.
func (e *StatusError) permanent() bool {
	return e.Code >= 400 && e.Code < 500 && e.Code != 408 && e.Code != 429
}
