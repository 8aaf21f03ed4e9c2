package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/svc-dev/svc"
)

// progressFlag is --progress of the commands that wait for long work.
type progressFlag struct{ mode string }

func (p *progressFlag) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.mode, "progress", "auto", "progress line on stderr while waiting: auto (only when stderr is a terminal), always or never")
}

func (p *progressFlag) check() error {
	switch p.mode {
	case "auto", "always", "never":
		return nil
	}
	return fmt.Errorf("--progress %q: want auto, always or never", p.mode)
}

// enabled reports whether the progress line is drawn on w.
func (p *progressFlag) enabled(w io.Writer) bool {
	switch p.mode {
	case "always":
		return true
	case "never":
		return false
	}
	return isTTY(w)
}

// isTTY reports whether w is a character device (a terminal), not a
// file or a pipe.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressRefresh is how often the line is redrawn, for the elapsed time.
const progressRefresh = 500 * time.Millisecond

// progressLine draws one line on stderr, redrawn in place ("\r" and erase
// to the end of the line): what is running, its counts when known, and the
// time since it started. It never writes to stdout, where results go. Its
// goroutine is started by newProgressLine and ended by stop.
type progressLine struct {
	w     io.Writer
	label string
	start time.Time

	mu    sync.Mutex
	prog  *svc.RunProgress
	note  string
	wrote bool

	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// newProgressLine starts the line; a disabled one (on false) draws
// nothing, and all its methods are safe to call.
func newProgressLine(w io.Writer, on bool, label string) *progressLine {
	p := &progressLine{w: w, label: label, start: time.Now(), done: make(chan struct{}), stopped: make(chan struct{})}
	if !on {
		close(p.stopped)
		p.w = nil
		return p
	}
	go p.loop()
	return p
}

func (p *progressLine) loop() {
	defer close(p.stopped)
	t := time.NewTicker(progressRefresh)
	defer t.Stop()
	for {
		p.draw()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
}

// set records the latest progress; it never blocks for long, so it may be
// a svc.ProgressFunc.
func (p *progressLine) set(pr svc.RunProgress) {
	p.mu.Lock()
	p.prog = &pr
	p.mu.Unlock()
}

// setNote replaces the word after the label ("running", "cancelling").
func (p *progressLine) setNote(note string) {
	p.mu.Lock()
	p.note = note
	p.mu.Unlock()
}

func (p *progressLine) draw() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	note := p.note
	if note == "" {
		note = "running"
	}
	line := fmt.Sprintf("%s: %s", p.label, note)
	if pr := p.prog; pr != nil {
		line += fmt.Sprintf(", %d completed, %d failed, %d running", pr.Completed, pr.Failed, pr.Running)
		if pr.Total > 0 {
			line += fmt.Sprintf(" of %d", pr.Total)
		}
	}
	line += fmt.Sprintf(" (%s)", time.Since(p.start).Truncate(time.Second))
	fmt.Fprint(p.w, "\r\x1b[K"+line)
	p.wrote = true
}

// stop ends the goroutine and erases the line, so what follows on stderr
// starts on a clean line.
func (p *progressLine) stop() {
	p.once.Do(func() {
		if p.w == nil {
			return
		}
		close(p.done)
		<-p.stopped
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.wrote {
			fmt.Fprint(p.w, "\r\x1b[K")
		}
	})
}

// onInterrupt calls cancel at the first SIGINT or SIGTERM, after saying on
// errw that the run is being cancelled; the command then waits for the
// run's terminal state. A second signal exits the process at once (status
// 130). The returned stop ends the watch; call it when the wait is over.
func onInterrupt(errw io.Writer, what string, cancel func()) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-sigs:
		}
		fmt.Fprintf(errw, "\r\x1b[Ksvc: interrupted: cancelling %s (interrupt again to exit at once)\n", what)
		// cancel may be a request to the server: it runs aside, so that
		// a second signal is still heard, and is waited for before the
		// watch ends.
		cancelled := make(chan struct{})
		go func() {
			defer close(cancelled)
			cancel()
		}()
		select {
		case <-done:
			<-cancelled
		case <-sigs:
			fmt.Fprintln(errw, "svc: interrupted again: exiting without waiting")
			os.Exit(130)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			<-finished
		})
	}
}
