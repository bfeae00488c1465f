package eventlog

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// MaxTornTail is the largest run of damaged bytes at the end of a log that
// counts as a torn tail (a crash mid-write) rather than corruption: the
// longest line a writer writes and then some, so that a crash while writing
// the longest TASK_START still leaves a torn tail.
const MaxTornTail = MaxLineBytes + 4096

// CorruptError reports damage that is not a torn tail: a bad line in the
// middle of a log, a gap in seq, or a log that belongs to another task.
// Nothing is written when it is returned.
type CorruptError struct {
	Path   string
	Line   int
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: %s; the log was damaged after it was written, so apollo changes nothing: "+
		"restore it from a copy, or start over with --fresh (the damaged log stays as it is)", e.Path, e.Line, e.Reason)
}

// Tail describes what a reader found after the last good record.
type Tail struct {
	// End is the offset just past the last good line.
	End int64
	// Torn is the number of damaged bytes after End (a torn tail), 0 if none.
	Torn int64
	// Lines is the number of good lines.
	Lines int
	// LastSeq is the seq of the last good record, 0 for an empty log.
	LastSeq int64
	// Version is the highest format version of the log's TASK_STARTs: a
	// newer apollo that resumed the task writes its own.
	Version int
}

// ReadOptions say what a log must be to be read.
type ReadOptions struct {
	// TaskID, when set, must match the task_id of every record.
	TaskID string
	// Offset and Seq let a reader start after a known prefix (a snapshot):
	// reading begins at Offset and the first record must have seq Seq+1.
	Offset int64
	Seq    int64
}

// Read reads the log at path, calling visit for each good record in order.
// A torn tail is reported in the returned Tail and not visited; any other
// damage is a *CorruptError. Read never modifies the file.
func Read(path string, opts ReadOptions, visit func(*Record) error) (Tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return Tail{}, fmt.Errorf("open event log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Tail{}, fmt.Errorf("read event log %s: %w", path, err)
	}
	if opts.Offset > 0 {
		// A prefix (a snapshot) that ends past the log's end is not a prefix
		// of this log; reading on would report an End beyond the file.
		if opts.Offset > fi.Size() {
			return Tail{}, fmt.Errorf("read event log %s: offset %d is past its end (%d bytes)", path, opts.Offset, fi.Size())
		}
		if _, err := f.Seek(opts.Offset, io.SeekStart); err != nil {
			return Tail{}, fmt.Errorf("read event log %s: %w", path, err)
		}
	}
	return scan(f, fi.Size()-opts.Offset, path, opts, int(opts.Seq), visit) // one line per seq before Offset
}

// ReadAll reads every good record of the log at path.
func ReadAll(path string, opts ReadOptions) ([]*Record, Tail, error) {
	var recs []*Record
	tail, err := Read(path, opts, func(r *Record) error {
		recs = append(recs, r)
		return nil
	})
	return recs, tail, err
}

// scan reads records from r. It is the one parser of the format. size is
// about how many bytes r holds (a live writer may add more), to size the
// buffer. lines is the number of lines before opts.Offset, so that errors
// name the line of the file.
func scan(r io.Reader, size int64, path string, opts ReadOptions, lines int, visit func(*Record) error) (Tail, error) {
	br := bufio.NewReaderSize(r, int(min(max(size+1, 4<<10), 256<<10)))
	tail := Tail{End: opts.Offset, LastSeq: opts.Seq}
	lineNo := lines
	var long []byte
	var a arena
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: gather it, up to the limit.
			long = append(long[:0], line...)
			for err == bufio.ErrBufferFull && len(long) <= MaxLineBytes {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
			if len(line) > MaxLineBytes {
				return tail, &CorruptError{Path: path, Line: lineNo + 1,
					Reason: fmt.Sprintf("line is longer than %d bytes", MaxLineBytes)}
			}
		}
		if len(line) == 0 && err == io.EOF {
			return tail, nil
		}
		if err != nil && err != io.EOF {
			return tail, fmt.Errorf("read event log %s: %w", path, err)
		}
		lineNo++
		if line[len(line)-1] != '\n' {
			// A last line without its newline: a write cut short, unless it
			// is two good records with the line end between them damaged.
			if _, err := Decode(line); err != nil {
				if r := splitRecord(line); r != nil {
					return tail, &CorruptError{Path: path, Line: lineNo,
						Reason: fmt.Sprintf("%v; the line holds record seq %d and another: the line end after it was damaged", err, r.Seq)}
				}
			}
			tail.Torn = int64(len(line))
			return tail, nil
		}
		rec, reason, misplaced := checkLine(line[:len(line)-1], &a, tail, opts, lineNo)
		if reason != "" {
			bad := &CorruptError{Path: path, Line: lineNo, Reason: reason}
			if misplaced {
				// The line decoded fine but is in the wrong place: never a crash artifact.
				return tail, bad
			}
			first := lineNo == 1 && opts.Offset == 0
			torn, err := classifyTail(br, bytes.Clone(line), first, bad)
			tail.Torn = torn
			return tail, err
		}
		if rec.EventType == TaskStart && rec.Start != nil && rec.Start.Version > tail.Version {
			tail.Version = rec.Start.Version
		}
		tail.End += int64(len(line))
		tail.Lines++
		tail.LastSeq = rec.Seq
		if err := visit(rec); err != nil {
			return tail, err
		}
	}
}

// checkLine decodes one line and checks its place in the log. It returns a
// reason when the line is not a good next record, and misplaced when the line
// is a good record in the wrong place.
func checkLine(line []byte, a *arena, tail Tail, opts ReadOptions, lineNo int) (rec *Record, reason string, misplaced bool) {
	rec, err := decode(line, a)
	if err != nil {
		return nil, err.Error(), false
	}
	if opts.TaskID != "" && rec.TaskID != opts.TaskID {
		return rec, fmt.Sprintf("record belongs to task %q, not %q", rec.TaskID, opts.TaskID), true
	}
	if rec.Seq != tail.LastSeq+1 {
		return rec, fmt.Sprintf("seq %d follows %d", rec.Seq, tail.LastSeq), true
	}
	if lineNo == 1 && opts.Offset == 0 {
		if rec.EventType != TaskStart || rec.Start == nil {
			return rec, fmt.Sprintf("first record is %s, not a TASK_START", rec.EventType), true
		}
	}
	return rec, "", false
}

// classifyTail decides whether the bad line and everything after it is a
// torn tail (a crash artifact: no good record anywhere in it, and not too
// long) or corruption, reported as bad. It returns the torn tail's size.
// first says the bad line is the log's first: then only that one line may be
// torn, since the first record is fsynced before anything else is written.
func classifyTail(br *bufio.Reader, badLine []byte, first bool, bad *CorruptError) (int64, error) {
	rest, err := io.ReadAll(io.LimitReader(br, MaxTornTail+1))
	if err != nil {
		return 0, fmt.Errorf("read event log %s: %w", bad.Path, err)
	}
	size := int64(len(badLine) + len(rest))
	if size > MaxTornTail {
		return 0, bad
	}
	if first && len(rest) > 0 {
		// Several lines and none good (a converted or foreign file) is not
		// what a crash leaves; cutting it would throw the whole log away.
		return 0, bad
	}
	// A good record after the damage, or two run together by a damaged line
	// end, means the damage is in the middle of the log, not at its end.
	if r := splitRecord(badLine[:len(badLine)-1]); r != nil {
		bad.Reason += fmt.Sprintf("; the line holds record seq %d and another: the line end after it was damaged", r.Seq)
		return 0, bad
	}
	for _, l := range bytes.Split(rest, []byte("\n")) {
		r, err := Decode(l)
		if err != nil {
			r = splitRecord(l)
		}
		if r != nil {
			bad.Reason += fmt.Sprintf("; a good record (seq %d) follows the damage", r.Seq)
			return 0, bad
		}
	}
	return size, nil
}

// splitRecord reports a line that is two good records joined by one damaged
// byte where the newline between them was: it returns the first record, or
// nil. A crash never leaves that (the writer ends every record with its
// newline in the same write), so such a line is damage, not a torn write.
func splitRecord(line []byte) *Record {
	marker := []byte(`,"crc":"`)
	var sum uint32 // CRC-32C of line[:done]
	done := 0
	for from := 0; ; {
		i := bytes.Index(line[from:], marker)
		if i < 0 {
			return nil
		}
		i += from
		from = i + 1
		end := i + crcSuffixLen
		if end+1 >= len(line) {
			return nil
		}
		sum = crc32.Update(sum, castagnoli, line[done:i])
		done = i
		want, ok := parseCRC(line[i:end])
		if !ok || crc32.Update(sum, castagnoli, []byte{'}'}) != want {
			continue
		}
		first, err := Decode(line[:end])
		if err != nil {
			continue
		}
		if _, err := Decode(line[end+1:]); err == nil {
			return first
		}
	}
}
