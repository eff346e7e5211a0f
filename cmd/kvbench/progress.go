package main

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is a progress bar on stderr, or nothing: a nil *progress (quiet
// runs) accepts every call.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress returns a bar counting to total, or nil when quiet. A
// non-empty unit shows the count and its rate ("ops"); time-bound phases
// count milliseconds and show only the bar.
func newProgress(w io.Writer, quiet bool, desc string, total int64, unit string) *progress {
	if quiet || total <= 0 {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
	}
	if unit != "" {
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit))
	}
	return &progress{bar: progressbar.NewOptions64(total, opts...)}
}

// set moves the bar to n. Drawing errors are ignored: a bar that cannot
// draw is no reason to stop a benchmark.
func (p *progress) set(n int64) {
	if p != nil {
		_ = p.bar.Set64(n)
	}
}

// done removes the bar.
func (p *progress) done() {
	if p != nil {
		_ = p.bar.Finish()
	}
}
