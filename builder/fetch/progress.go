package fetch

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// NewProgress returns the progress display suited to f: a live bar with
// bytes/s and ETA when f is a terminal, else plain lines every five seconds
// (a log file or CI output should not fill with redraws).
func NewProgress(f *os.File) Progress {
	if term.IsTerminal(int(f.Fd())) {
		return NewBarProgress(f)
	}
	return NewLineProgress(f, 5*time.Second)
}

// NewLineProgress writes at most one line per transfer and interval, e.g.
// "fetching X: 40 MiB / 130 MiB (31%), 12 MiB/s", and one line when a
// transfer ends.
func NewLineProgress(w io.Writer, every time.Duration) Progress {
	return &lineProgress{w: w, every: every, now: time.Now, xfers: map[string]*lineXfer{}}
}

type lineProgress struct {
	mu    sync.Mutex
	w     io.Writer
	every time.Duration
	now   func() time.Time // replaced in tests
	xfers map[string]*lineXfer
}

type lineXfer struct {
	start     time.Time
	startDone int64 // bytes present when the transfer began (a resume)
	lastT     time.Time
	lastDone  int64
	done      int64
}

func (p *lineProgress) Update(name string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	x := p.xfers[name]
	if x == nil {
		x = &lineXfer{start: now, startDone: done, lastT: now, lastDone: done}
		p.xfers[name] = x
	}
	if done < x.done {
		// The server restarted the transfer: measure the rate afresh.
		x.lastDone, x.startDone = done, done
	}
	x.done = done
	if now.Sub(x.lastT) < p.every {
		return
	}
	rate := float64(done-x.lastDone) / now.Sub(x.lastT).Seconds()
	x.lastT, x.lastDone = now, done
	if total > 0 {
		fmt.Fprintf(p.w, "fetching %s: %s / %s (%d%%), %s/s\n", name, humanBytes(done), humanBytes(total), done*100/total, humanBytes(int64(rate)))
	} else {
		fmt.Fprintf(p.w, "fetching %s: %s, %s/s\n", name, humanBytes(done), humanBytes(int64(rate)))
	}
}

func (p *lineProgress) Finish(name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.xfers[name]
	delete(p.xfers, name)
	if err != nil {
		fmt.Fprintf(p.w, "fetching %s failed: %v\n", name, err)
		return
	}
	if x == nil {
		fmt.Fprintf(p.w, "fetched %s\n", name)
		return
	}
	el := p.now().Sub(x.start)
	got := x.done - x.startDone
	rate := ""
	if el > 0 {
		rate = fmt.Sprintf(", %s/s", humanBytes(int64(float64(got)/el.Seconds())))
	}
	fmt.Fprintf(p.w, "fetched %s: %s in %s%s\n", name, humanBytes(x.done), el.Round(100*time.Millisecond), rate)
}

// humanBytes formats a byte count in binary units as people read them.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f %ciB", v, "KMGTP"[i])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// NewBarProgress draws one progress bar per transfer on w with
// github.com/schollz/progressbar, showing bytes, bytes/s and the ETA.
func NewBarProgress(w io.Writer) Progress {
	return &barProgress{w: w, bars: map[string]*progressbar.ProgressBar{}}
}

type barProgress struct {
	mu   sync.Mutex
	w    io.Writer
	bars map[string]*progressbar.ProgressBar
}

func (p *barProgress) Update(name string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.bars[name]
	if b == nil || (total > 0 && b.GetMax64() != total) {
		if b != nil {
			b.Exit()
		}
		b = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("fetching "+name),
			progressbar.OptionShowBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowCount(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
		p.bars[name] = b
	}
	b.Set64(done)
}

func (p *barProgress) Finish(name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.bars[name]
	delete(p.bars, name)
	if b == nil {
		return
	}
	if err != nil {
		b.Exit()
		fmt.Fprintf(p.w, "\nfetching %s failed: %v\n", name, err)
		return
	}
	b.Finish()
}
