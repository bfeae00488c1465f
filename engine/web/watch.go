package web

// change is what a watcher reports: something in folder dir changed, at
// the entry name ("" when it cannot tell which).
type change struct {
	dir  string
	name string
}

// watcher tells of changes in the folders it was asked to watch.
type watcher interface {
	// add watches the folder dir (not its subfolders); a missing folder is
	// an error.
	add(dir string) error
	// changes delivers what changed; closed by close.
	changes() <-chan change
	close() error
}
