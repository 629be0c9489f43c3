package server

import (
	"context"
	"crypto/sha256"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/rls"
)

// fileWatch notices when the content of some files changes. It polls
// instead of using inotify because Kubernetes ConfigMaps change files by
// swapping a symlink two levels up (..data), which inotify on the file
// itself does not see; os.ReadFile follows the links every time, so a
// swap is a change like any other. Comparing content hashes (not mtimes)
// ignores touches and rewrites of the same bytes.
//
// A change counts once the new content has been read twice in a row, one
// poll apart: an editor or a `cp` writing the file in place may be caught
// half-way, and a file cut short can still load (a list of policies that
// ends early), so a change is acted on only when the content has settled.
// A write may begin again as the files are loaded: what was loaded serves
// only if the files still hold the settled content once it is (see
// unchanged).
//
// Files that cannot all be read (one deleted, moved away, a link to
// nothing, unreadable) are a content of their own, gone, and follow the
// same rule: gone at two polls in a row is a change, which the caller
// acts on by loading the files, and so fails as a reload would with a
// bad file, once, however long they stay gone; their return, with the
// content they had or another, is a change again. A file gone for less
// than a poll interval (deleted and written anew, say) is seen gone at
// one poll at most, which is no change: the content that follows settles
// like any other.
//
// A reload the watcher did not make (SIGHUP's, see reload) puts what it
// read in force too: the watcher's next poll would otherwise see the
// content the reload loaded as a change, and load it again, counting
// and logging a failure twice.
//
// A path may be a directory: the files rls.ConfigFiles lists count, as
// Envoy's reference service reads them (every file, recursively, but for
// names starting with a dot, such as a ConfigMap's ..data, whose files
// are read through the links beside it). A directory is gone when it is,
// and when it holds no such file, which the loader refuses too.
type fileWatch struct {
	paths []string
	// mu is held by a poll, its onChange included, and by reload: the
	// two never interleave, and the fields below are set by one at a
	// time. It is taken before the server's reloadMu.
	mu      sync.Mutex
	sum     [sha256.Size]byte // the content in force, or gone
	next    [sha256.Size]byte // a different content, read once
	seen    bool              // sum is set
	pending bool              // next is set
}

// gone is the content of files that cannot all be read: a sum that, like
// the zero sum unchanged leaves, no files' content hashes to.
var gone = sha256.Sum256([]byte("sluice: the watched files cannot all be read"))

// changed reads the files and reports whether their content, gone
// included, differs from the content in force and is the same as at the
// previous call. Once run has started, it is called by poll alone.
func (w *fileWatch) changed() bool {
	sum := w.hash()
	switch {
	case !w.seen:
		w.sum, w.seen = sum, true
		return false
	case sum == w.sum:
		w.pending = false
		return false
	case !w.pending || sum != w.next:
		w.next, w.pending = sum, true
		return false
	}
	w.sum, w.pending = sum, false
	return true
}

// unchanged reports whether the files still hold the content in force,
// the one changed last settled on: a caller that read them after changed
// reported a change asks it once it has, to tell whether it read that
// content or a later one, which may have been caught half written. It
// runs on run's goroutine, in onChange.
//
// When they do not, the caller drops what it read, and the content it
// meant to load is in force no longer: whatever the files settle on
// next, that very content again included, is a change.
//
// Files in force gone and still gone are unchanged: the load failed
// because they are gone, the failure to report. w.mu is held, by poll.
func (w *fileWatch) unchanged() bool {
	if w.seen && w.hash() == w.sum {
		return true
	}
	w.sum, w.pending = [sha256.Size]byte{}, false // no content hashes to it
	return false
}

// hash hashes the names and contents of every file watched, or returns
// gone if one cannot be read.
func (w *fileWatch) hash() [sha256.Size]byte {
	files, err := rls.Files(w.paths...)
	if err != nil {
		return gone
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return gone
		}
		sum := sha256.Sum256(b)
		h.Write([]byte(f))
		h.Write([]byte{0})
		h.Write(sum[:])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// run polls every interval until ctx ends, calling onChange after each
// change: a change is acted on one to two intervals after it is written.
// The content in force is the one of the first call to changed, which
// the caller makes before it loads the files: a change written after
// that is a change, however late run starts.
func (w *fileWatch) run(ctx context.Context, interval time.Duration, onChange func()) {
	every(ctx, interval, func() { w.poll(onChange) })
}

// every calls f every d, on the wall clock, until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// poll reads the files once, and calls onChange if they changed.
func (w *fileWatch) poll(onChange func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed() {
		onChange()
	}
}

// reload calls load, a reload of the files the watcher did not ask for
// (SIGHUP's), between polls, and puts the content load read in force,
// whether it loaded or not: the watcher acts on the next change, not on
// the content load already acted on. If the files changed while load
// read them, what it read may be neither content, and none is in force:
// whatever the files settle on is a change, the content read before the
// load included. A nil w, no watcher, calls load alone.
func (w *fileWatch) reload(load func()) {
	if w == nil {
		load()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.hash()
	load()
	if w.hash() == before {
		w.sum = before
	} else {
		w.sum = [sha256.Size]byte{} // no content hashes to it
	}
	w.seen, w.pending = true, false
}
