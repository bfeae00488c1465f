package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// SnapshotVersion is the format version of snapshot files. A snapshot of
// another version is ignored.
const SnapshotVersion = 1

// Snapshot is the replayed state of a prefix of a log, saved so that a
// resume reads only the records after it (SPEC §4). It names the prefix so
// that one pread proves it still belongs to the log: the record that ends
// at Offset has seq Seq and checksum RecordCRC, and the log's first
// TASK_START has RunNonce.
//
// On disk it is one JSON object ending, like a log line, in a crc field:
// the CRC-32C of the object as it would read without that field.
type Snapshot struct {
	Version int    `json:"v"`
	TaskID  string `json:"task_id"`
	// Log is the base name of the log file.
	Log string `json:"log"`
	// RunNonce is the run_nonce of the log's first TASK_START.
	RunNonce string `json:"run_nonce"`
	// FileID is the log file's device and inode: a log rewritten by an
	// editor or sed -i is a new file, so its prefix is read again and
	// damage in it is found.
	FileID string `json:"file_id"`
	// Offset is the size of the prefix in bytes, Seq its last record's seq
	// and RecordCRC that record's crc field.
	Offset    int64  `json:"offset"`
	Seq       int64  `json:"seq"`
	RecordCRC string `json:"record_crc"`
	// LogVersion is the newest format version of the prefix's TASK_STARTs.
	LogVersion int `json:"log_version"`
	// State is the replay of the prefix.
	State *State `json:"state"`
}

// ErrNoSnapshot is returned by LoadSnapshot when there is no snapshot file.
var ErrNoSnapshot = errors.New("no snapshot")

// NewSnapshot describes the prefix of the log at logPath that ends at
// offset with record seq, whose replay is st. It reads the log twice (its
// first line and the line ending at offset) to name the prefix.
func NewSnapshot(logPath string, offset, seq int64, logVersion int, st *State) (*Snapshot, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	nonce, err := firstNonce(f)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", logPath, err)
	}
	rec, crc, err := recordEndingAt(f, offset)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", logPath, err)
	}
	id, err := fileID(f)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", logPath, err)
	}
	if rec.Seq != seq {
		return nil, fmt.Errorf("snapshot of %s: the record ending at offset %d has seq %d, not %d", logPath, offset, rec.Seq, seq)
	}
	return &Snapshot{Version: SnapshotVersion, TaskID: st.TaskID, Log: filepath.Base(logPath), RunNonce: nonce, FileID: id,
		Offset: offset, Seq: seq, RecordCRC: crc, LogVersion: logVersion, State: st}, nil
}

// Marshal encodes the snapshot with its checksum.
func (s *Snapshot) Marshal() ([]byte, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	sum := crc32.Checksum(body, castagnoli)
	out := make([]byte, 0, len(body)+crcSuffixLen+1)
	out = append(out, body[:len(body)-1]...)
	out = fmt.Appendf(out, `,"crc":"%08x"}`, sum)
	return append(out, '\n'), nil
}

// WriteSnapshot writes s to path atomically through fsys: a temporary file,
// fsynced, renamed over path, and the folder fsynced. A failure leaves path
// as it was.
func WriteSnapshot(fsys FS, path string, s *Snapshot) error {
	if fsys == nil {
		fsys = OS{}
	}
	data, err := s.Marshal()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := MkdirAll(fsys, dir); err != nil {
		return fmt.Errorf("write snapshot %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := fsys.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write snapshot %s: %w", path, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("write snapshot %s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("write snapshot %s: sync folder: %w", path, err)
	}
	return nil
}

// LoadSnapshot reads the snapshot at path and checks it against the log at
// logPath of task taskID. It returns ErrNoSnapshot when there is none, and
// another error saying why when the snapshot does not match the log: then
// the caller must replay the whole log.
func LoadSnapshot(path, logPath, taskID string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoSnapshot
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	s, err := decodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := s.check(logPath, taskID); err != nil {
		return nil, fmt.Errorf("snapshot %s does not match log %s: %w", path, logPath, err)
	}
	return s, nil
}

func decodeSnapshot(data []byte) (*Snapshot, error) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	if len(data) < crcSuffixLen+2 {
		return nil, errors.New("file too short")
	}
	want, ok := parseCRC(data[len(data)-crcSuffixLen:])
	if !ok {
		return nil, errors.New("no crc field at the end")
	}
	body := make([]byte, 0, len(data)-crcSuffixLen+1)
	body = append(body, data[:len(data)-crcSuffixLen]...)
	body = append(body, '}')
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("checksum mismatch (file says %08x, content gives %08x)", want, got)
	}
	var s Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("not a JSON snapshot: %w", err)
	}
	if s.Version != SnapshotVersion {
		return nil, fmt.Errorf("format v%d, this apollo reads v%d", s.Version, SnapshotVersion)
	}
	if s.State == nil {
		return nil, errors.New("no state")
	}
	if s.State.Steps == nil {
		s.State.Steps = map[string]*StepState{}
	}
	if s.State.Markers == nil {
		s.State.Markers = map[string]*MarkerInfo{}
	}
	return &s, nil
}

func (s *Snapshot) check(logPath, taskID string) error {
	switch {
	case s.TaskID != taskID || s.State.TaskID != taskID:
		return fmt.Errorf("it is of task %q", s.TaskID)
	case s.Log != filepath.Base(logPath):
		return fmt.Errorf("it covers log %s", s.Log)
	case s.Seq < 1 || s.Offset <= 0 || s.State.LastSeq != s.Seq:
		return fmt.Errorf("it covers no records (seq %d, offset %d, state at seq %d)", s.Seq, s.Offset, s.State.LastSeq)
	case s.LogVersion > Version:
		return fmt.Errorf("its log has format v%d, newer than this apollo (v%d)", s.LogVersion, Version)
	}
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if id, err := fileID(f); err != nil || id != s.FileID {
		return fmt.Errorf("the log is another file (%s, not %s): it was replaced or rewritten", id, s.FileID)
	}
	rec, crc, err := recordEndingAt(f, s.Offset)
	if err != nil {
		return err
	}
	if rec.Seq != s.Seq || crc != s.RecordCRC {
		return fmt.Errorf("the record ending at offset %d is seq %d crc %s, not seq %d crc %s", s.Offset, rec.Seq, crc, s.Seq, s.RecordCRC)
	}
	nonce, err := firstNonce(f)
	if err != nil {
		return err
	}
	if nonce != s.RunNonce {
		return fmt.Errorf("the log's run_nonce is %q, not %q: the log was replaced", nonce, s.RunNonce)
	}
	return nil
}

// recordEndingAt reads the line of f that ends (newline included) at
// offset, and returns its record and crc field.
func recordEndingAt(f *os.File, offset int64) (*Record, string, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if offset > fi.Size() {
		return nil, "", fmt.Errorf("offset %d is past the log's end (%d bytes)", offset, fi.Size())
	}
	for window := int64(4 << 10); ; window *= 8 {
		start := max(offset-window, 0)
		buf := make([]byte, offset-start)
		if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
			return nil, "", err
		}
		if len(buf) == 0 || buf[len(buf)-1] != '\n' {
			return nil, "", fmt.Errorf("no line ends at offset %d", offset)
		}
		i := bytes.LastIndexByte(buf[:len(buf)-1], '\n')
		if i < 0 && start > 0 && window <= MaxLineBytes {
			continue // a long line: read further back
		}
		line := buf[i+1 : len(buf)-1]
		rec, err := Decode(line)
		if err != nil {
			return nil, "", fmt.Errorf("the line ending at offset %d: %w", offset, err)
		}
		suffix := line[len(line)-crcSuffixLen:]
		return rec, string(suffix[8:16]), nil
	}
}

// fileID names the file f is, whatever its name: device and inode.
func fileID(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("no inode number on this system")
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}

// firstNonce returns the run_nonce of the TASK_START on f's first line.
func firstNonce(f *os.File) (string, error) {
	for size := int64(4 << 10); ; size *= 8 {
		buf := make([]byte, size)
		n, err := f.ReadAt(buf, 0)
		if err != nil && err != io.EOF {
			return "", err
		}
		buf = buf[:n]
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			if err == nil && size <= MaxLineBytes {
				continue
			}
			return "", errors.New("the log has no complete first line")
		}
		rec, derr := Decode(buf[:i])
		if derr != nil {
			return "", fmt.Errorf("first line: %w", derr)
		}
		if rec.EventType != TaskStart || rec.Start == nil {
			return "", fmt.Errorf("first record is %s, not a TASK_START", rec.EventType)
		}
		return rec.Start.RunNonce, nil
	}
}
