package server

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// fileWatch notices when a file's content changes. It polls instead of
// using inotify because Kubernetes ConfigMaps change files by swapping a
// symlink two levels up (..data), which inotify on the file itself does not
// see; os.ReadFile follows the links every time, so a swap is a change like
// any other. Comparing content hashes (not mtimes) ignores touches and
// rewrites of the same bytes.
type fileWatch struct {
	path string
	sum  [sha256.Size]byte
	seen bool
}

// changed reads the file and reports whether its content differs from the
// last time. A file that cannot be read is not a change: the caller keeps
// what it has until the file is back.
func (w *fileWatch) changed() bool {
	b, err := os.ReadFile(w.path)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(b)
	if w.seen && sum == w.sum {
		return false
	}
	first := !w.seen
	w.sum, w.seen = sum, true
	return !first
}

// run polls every interval until ctx ends, calling onChange after each
// change.
func (w *fileWatch) run(ctx context.Context, interval time.Duration, onChange func()) {
	w.changed() // remember the content we start with
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.changed() {
				onChange()
			}
		}
	}
}
