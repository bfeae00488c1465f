package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// SnapshotVersion is the format version of snapshot files. A snapshot of
// another version is ignored, and its log replayed. Version 2: a step's
// state says whether its remote attempt was cut off (cut_off).
const SnapshotVersion = 2

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
	f, err := OpenRegular(logPath, false)
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

// WriteSnapshot writes s to path with WriteFileAtomic through fsys, making
// path's folder first if need be. A failure leaves path as it was; a
// symbolic link planted at path is replaced, its target never written.
func WriteSnapshot(fsys FS, path string, s *Snapshot) error {
	if fsys == nil {
		fsys = OS{}
	}
	if err := MkdirAll(fsys, filepath.Dir(path)); err != nil {
		return fmt.Errorf("write snapshot %s: %w", path, err)
	}
	if err := WriteFileAtomic(fsys, path, 0o644, s.encode); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// encode writes the snapshot to w as json.Marshal would render it, with its
// checksum, a piece at a time: the state of a 100,000-step task is over a
// hundred megabytes of JSON, which a run should not hold in memory (and
// json.Encoder would). Only the big parts of the state (its steps, their
// order, the TASK_START's step list) are written element by element; every
// other field is written whole by encoding/json, found through reflection so
// that a field added to a struct is written with no change here.
func (s *Snapshot) encode(w io.Writer) error {
	e := &snapshotEncoder{w: bufio.NewWriterSize(w, 256<<10)}
	e.enc = json.NewEncoder(&e.buf)
	e.object(reflect.ValueOf(s).Elem(), map[string]func(reflect.Value){"state": e.state}, false)
	// The object is left open: its checksum covers it as it would end
	// without the crc field, with "}".
	sum := crc32.Update(e.sum, castagnoli, []byte{'}'})
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, `,"crc":"%08x"}`+"\n", sum)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	if e.err != nil {
		return fmt.Errorf("encode snapshot: %w", e.err)
	}
	return nil
}

// snapshotEncoder writes JSON to w and keeps the CRC-32C of what it wrote.
// Its first error sticks and stops further writes.
type snapshotEncoder struct {
	w   *bufio.Writer
	sum uint32
	err error
	buf bytes.Buffer  // one value encoded by enc
	enc *json.Encoder // over buf
	one [1]byte
}

func (e *snapshotEncoder) write(b []byte) {
	if e.err != nil {
		return
	}
	e.sum = crc32.Update(e.sum, castagnoli, b)
	_, e.err = e.w.Write(b)
}

func (e *snapshotEncoder) byte(c byte) {
	e.one[0] = c
	e.write(e.one[:])
}

// value writes v as json.Marshal would.
func (e *snapshotEncoder) value(v any) {
	if e.err != nil {
		return
	}
	e.buf.Reset()
	if e.err = e.enc.Encode(v); e.err == nil {
		e.write(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	}
}

// object writes the struct v as json.Marshal would (it knows json tags with
// omitempty and omitzero), but for the fields whose JSON names are in
// stream: their functions write their values. It leaves the object open
// (no closing brace) unless closed.
func (e *snapshotEncoder) object(v reflect.Value, stream map[string]func(reflect.Value), closed bool) {
	e.byte('{')
	sep := false
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := strings.Split(sf.Tag.Get("json"), ",")
		if sf.Anonymous || slices.Contains(tag[1:], "string") {
			e.err = fmt.Errorf("field %s.%s: embedded or with the string option: not supported", t.Name(), sf.Name)
			return
		}
		name := tag[0]
		if name == "-" && len(tag) == 1 {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fv := v.Field(i)
		if slices.Contains(tag[1:], "omitempty") && emptyValue(fv) || slices.Contains(tag[1:], "omitzero") && fv.IsZero() {
			continue
		}
		if sep {
			e.byte(',')
		}
		sep = true
		e.value(name)
		e.byte(':')
		if f, ok := stream[name]; ok {
			f(fv)
		} else {
			e.value(fv.Interface())
		}
	}
	if closed {
		e.byte('}')
	}
}

// emptyValue is what omitempty leaves out.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// state writes a *State.
func (e *snapshotEncoder) state(v reflect.Value) {
	st, _ := v.Interface().(*State)
	if st == nil {
		e.value(nil)
		return
	}
	e.object(v.Elem(), map[string]func(reflect.Value){
		"start": e.start,
		"steps": func(reflect.Value) { e.steps(st.Steps) },
		"order": func(reflect.Value) { elements(e, st.Order) },
	}, true)
}

// start writes a *StartInfo, its step list one step at a time.
func (e *snapshotEncoder) start(v reflect.Value) {
	si, _ := v.Interface().(*StartInfo)
	if si == nil {
		e.value(nil)
		return
	}
	e.object(v.Elem(), map[string]func(reflect.Value){
		"steps": func(reflect.Value) { elements(e, si.Steps) },
	}, true)
}

// steps writes the state's steps one at a time, by id as json.Marshal
// orders a map's keys.
func (e *snapshotEncoder) steps(m map[string]*StepState) {
	if m == nil {
		e.value(nil)
		return
	}
	e.byte('{')
	for i, id := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			e.byte(',')
		}
		e.value(id)
		e.byte(':')
		e.value(m[id])
	}
	e.byte('}')
}

// elements writes a slice one element at a time.
func elements[T any](e *snapshotEncoder, s []T) {
	if s == nil {
		e.value(nil)
		return
	}
	e.byte('[')
	for i := range s {
		if i > 0 {
			e.byte(',')
		}
		e.value(&s[i])
	}
	e.byte(']')
}

// LoadSnapshot reads the snapshot at path and checks it against the log at
// logPath of task taskID. It returns ErrNoSnapshot when there is none, and
// another error saying why when the snapshot does not match the log: then
// the caller must replay the whole log.
func LoadSnapshot(path, logPath, taskID string) (*Snapshot, error) {
	data, err := readSnapshotFile(path)
	if errors.Is(err, fs.ErrNotExist) {
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

// readSnapshotFile reads the snapshot file at path, which must be a regular
// file: a link or a named pipe planted there is refused, not followed.
func readSnapshotFile(path string) ([]byte, error) {
	f, err := OpenRegular(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
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
	// The object as it would read without its crc field, in place: the
	// state of a big task is too big to copy.
	body := data[:len(data)-crcSuffixLen+1]
	body[len(body)-1] = '}'
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
	f, err := OpenRegular(logPath, false)
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
	if s.Offset <= verifiedPrefixMax {
		return verifyPrefix(f, s.Offset, s.Seq)
	}
	return nil
}

// verifiedPrefixMax is the largest prefix whose every line a resume checks
// again before it trusts a snapshot of it. The checks above prove that the
// prefix is still the log's (the same file, its first and last record); a
// byte changed in place in between (a disk's bit rot, an edit that keeps
// the file) shows only in its line's checksum, which costs reading the
// prefix: 2.2–4.2 ms for 4 MiB (about 11,000 records) on the 2-vCPU VM of
// docs/performance.md (BenchmarkVerifyPrefix), where a log of a million
// records (350 MB) would take most of a second, far more than a resume
// from a snapshot may. Beyond it the snapshot is trusted as it was
// verified when it was made; apollo inspect, which replays the whole log,
// still finds such damage.
const verifiedPrefixMax = 4 << 20

// verifyPrefix checks the checksum of every line of f's first offset bytes,
// and that they are seq lines: a prefix a snapshot may stand for. (check has
// made sure a line ends at offset.)
func verifyPrefix(f *os.File, offset, seq int64) error {
	lines := bufio.NewScanner(io.NewSectionReader(f, 0, offset))
	lines.Buffer(make([]byte, 0, 256<<10), MaxLineBytes+1)
	var n int64
	for lines.Scan() {
		n++
		if _, err := checkedPrefix(lines.Bytes()); err != nil {
			return fmt.Errorf("line %d of the prefix: %w", n, err)
		}
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("line %d of the prefix: %w", n+1, err)
	}
	if n != seq {
		return fmt.Errorf("the prefix has %d lines, not the %d records it had", n, seq)
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
	st, err := fstat(int(f.Fd()))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", uint64(st.Dev), uint64(st.Ino)), nil
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
