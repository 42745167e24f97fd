package fetch

import (
	"io"
	"net/http"
	"time"
)

// UserAgent is sent with every HTTP request, so that mirror operators can
// tell the tool's traffic apart.
const UserAgent = "tritonbuild"

// Options tune all fetchers. The zero value is usable: every unset field
// takes the default stated beside it.
type Options struct {
	// Client performs HTTP requests. Default: a client without an overall
	// timeout (large sources take minutes); StallTimeout bounds silence.
	Client *http.Client
	// Attempts is how many times one URL is tried before moving on to the
	// next one. Default 4.
	Attempts int
	// Backoff is the wait before the second attempt at a URL; it doubles
	// for each further attempt up to MaxBackoff. Defaults 1 s and 30 s.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// StallTimeout aborts an attempt when no byte arrived for this long.
	// Default 60 s.
	StallTimeout time.Duration
	// Progress receives an Update as each transfer advances and when it
	// ends. Sends block: the reader keeps reading until the fetch returns
	// (drawing is the caller's: cmd/tritonbuild draws bars). Nil: silent.
	Progress chan<- Update
	// ReachTimeout bounds each request of a reachability check (ReachURL,
	// ReachGit, ReachApt); an apt-get update the check needs gets ten
	// times as long. Default 20 s.
	ReachTimeout time.Duration
	// Log receives one-line notes for a person: retries, mirror failover,
	// apt's output. Nil: discarded.
	Log io.Writer

	// Git is the git executable. Default "git" from PATH.
	Git string
	// AptGet is the apt-get executable. Default "apt-get" from PATH.
	AptGet string
	// AptEtc is the apt configuration directory whose deb entries are
	// turned into deb-src entries. It is only read. Default "/etc/apt".
	AptEtc string
}

// Update reports the progress of one transfer, in the manner of
// go-containerregistry's v1.Update: Complete of Total bytes of Name have
// arrived (Total is -1 when unknown; Complete may go down when a server
// forces a restart). The last update of a transfer has Done set, and
// Error when the transfer failed. Several transfers may be under way at
// once; Name tells them apart.
type Update struct {
	Name            string
	Complete, Total int64
	Done            bool
	Error           error
}

// report sends u to the Progress channel, if any.
func (o Options) report(u Update) {
	if o.Progress != nil {
		o.Progress <- u
	}
}

func (o Options) client() *http.Client {
	if o.Client != nil {
		return o.Client
	}
	return http.DefaultClient
}

func (o Options) attempts() int {
	if o.Attempts > 0 {
		return o.Attempts
	}
	return 4
}

func (o Options) backoff(retry int) time.Duration {
	b, max := o.Backoff, o.MaxBackoff
	if b <= 0 {
		b = time.Second
	}
	if max <= 0 {
		max = 30 * time.Second
	}
	for i := 0; i < retry && b < max; i++ {
		b *= 2
	}
	return min(b, max)
}

func (o Options) stallTimeout() time.Duration {
	if o.StallTimeout > 0 {
		return o.StallTimeout
	}
	return time.Minute
}

func (o Options) log() io.Writer {
	if o.Log != nil {
		return o.Log
	}
	return io.Discard
}

func (o Options) git() string {
	if o.Git != "" {
		return o.Git
	}
	return "git"
}

func (o Options) aptGet() string {
	if o.AptGet != "" {
		return o.AptGet
	}
	return "apt-get"
}

func (o Options) aptEtc() string {
	if o.AptEtc != "" {
		return o.AptEtc
	}
	return "/etc/apt"
}
