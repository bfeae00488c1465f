package statedir

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"

	"apollo/eventlog"
)

// ReadLog is eventlog.Read for a live log or an archived one. An archived
// log (.jsonl.gz) is decompressed into a temporary file under os.TempDir()
// that is read and then removed: the event log's one parser takes a path,
// and keeping a single parser matters more than the copy.
func ReadLog(path string, opts eventlog.ReadOptions, visit func(*eventlog.Record) error) (eventlog.Tail, error) {
	if !IsArchive(path) {
		return eventlog.Read(path, opts, visit)
	}
	tmp, err := decompress(path)
	if err != nil {
		return eventlog.Tail{}, err
	}
	defer os.Remove(tmp)
	tail, err := eventlog.Read(tmp, opts, visit)
	if ce, ok := errors.AsType[*eventlog.CorruptError](err); ok {
		ce.Path = path
	} else if err != nil {
		err = fmt.Errorf("archived log %s: %w", path, err)
	}
	return tail, err
}

// Replay reads a live or archived log into a fresh state, showing each
// record to visit (when not nil) before the state applies it. taskID may be
// "" when it is not known; the log's records then name it.
func Replay(path, taskID string, visit func(*eventlog.Record)) (*eventlog.State, eventlog.Tail, error) {
	state := eventlog.NewState(taskID)
	tail, err := ReadLog(path, eventlog.ReadOptions{TaskID: taskID}, func(r *eventlog.Record) error {
		if state.TaskID == "" {
			state.TaskID = r.TaskID
		}
		if visit != nil {
			visit(r)
		}
		state.Apply(r)
		return nil
	})
	return state, tail, err
}

// decompress writes the content of the gzip file at path to a new
// temporary file and returns its name.
func decompress(path string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open archived log: %w", err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return "", fmt.Errorf("archived log %s: %w", path, err)
	}
	out, err := os.CreateTemp("", "apollo-archived-*.jsonl")
	if err != nil {
		return "", fmt.Errorf("archived log %s: decompress: %w", path, err)
	}
	_, err = io.Copy(out, zr)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = zr.Close()
	}
	if err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("archived log %s: decompress: %w", path, err)
	}
	return out.Name(), nil
}
