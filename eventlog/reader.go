package eventlog

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxTornTail is the largest run of damaged bytes at the end of a log that
// counts as a torn tail (a crash mid-write) rather than corruption.
const MaxTornTail = 1<<20 + 4096

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
	if opts.Offset > 0 {
		// A prefix (a snapshot) that ends past the log's end is not a prefix
		// of this log; reading on would report an End beyond the file.
		fi, err := f.Stat()
		if err != nil {
			return Tail{}, fmt.Errorf("read event log %s: %w", path, err)
		}
		if opts.Offset > fi.Size() {
			return Tail{}, fmt.Errorf("read event log %s: offset %d is past its end (%d bytes)", path, opts.Offset, fi.Size())
		}
		if _, err := f.Seek(opts.Offset, io.SeekStart); err != nil {
			return Tail{}, fmt.Errorf("read event log %s: %w", path, err)
		}
	}
	return scan(f, path, opts, 0, visit)
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

// scan reads records from r. It is the one parser of the format. lines is
// the number of lines before opts.Offset, so that errors name the line of
// the file.
func scan(r io.Reader, path string, opts ReadOptions, lines int, visit func(*Record) error) (Tail, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	tail := Tail{End: opts.Offset, LastSeq: opts.Seq}
	lineNo := lines
	var long []byte
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
			// A last line without its newline: a write cut short.
			tail.Torn = int64(len(line))
			return tail, nil
		}
		rec, reason := checkLine(line[:len(line)-1], tail, opts, lineNo)
		if reason != "" {
			first := lineNo == 1 && opts.Offset == 0
			torn, err := classifyTail(br, path, lineNo, first, int64(len(line)), reason)
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
// reason when the line is not a good next record.
func checkLine(line []byte, tail Tail, opts ReadOptions, lineNo int) (*Record, string) {
	rec, err := Decode(line)
	if err != nil {
		return nil, err.Error()
	}
	if opts.TaskID != "" && rec.TaskID != opts.TaskID {
		return rec, fmt.Sprintf("record belongs to task %q, not %q", rec.TaskID, opts.TaskID)
	}
	if rec.Seq != tail.LastSeq+1 {
		return rec, fmt.Sprintf("seq %d follows %d", rec.Seq, tail.LastSeq)
	}
	if lineNo == 1 && opts.Offset == 0 {
		if rec.EventType != TaskStart || rec.Start == nil {
			return rec, fmt.Sprintf("first record is %s, not a TASK_START", rec.EventType)
		}
	}
	return rec, ""
}

// classifyTail decides whether the bad line at lineNo and everything after
// it is a torn tail (a crash artifact: no good record anywhere in it, and not
// too long) or corruption. It returns the torn tail's size, or an error.
// first says the bad line is the log's first: then only that one line may be
// torn, since the first record is fsynced before anything else is written.
func classifyTail(br *bufio.Reader, path string, lineNo int, first bool, badLen int64, reason string) (int64, error) {
	corrupt := &CorruptError{Path: path, Line: lineNo, Reason: reason}
	if placementReason(reason) {
		// The line decoded fine but is in the wrong place: never a crash artifact.
		return 0, corrupt
	}
	rest, err := io.ReadAll(io.LimitReader(br, MaxTornTail+1))
	if err != nil {
		return 0, fmt.Errorf("read event log %s: %w", path, err)
	}
	size := badLen + int64(len(rest))
	if size > MaxTornTail {
		return 0, corrupt
	}
	if first && len(rest) > 0 {
		// Several lines and none good (a converted or foreign file) is not
		// what a crash leaves; cutting it would throw the whole log away.
		return 0, corrupt
	}
	// A line that decodes cleanly after the damage means the damage is in
	// the middle of the log, not at its end.
	for _, l := range bytes.Split(rest, []byte("\n")) {
		if _, err := Decode(l); err == nil {
			return 0, corrupt
		}
	}
	return size, nil
}

// placementReason reports reasons given for a line that decoded fine but is
// in the wrong place.
func placementReason(reason string) bool {
	for _, p := range []string{"seq ", "record belongs to task", "first record is"} {
		if strings.HasPrefix(reason, p) {
			return true
		}
	}
	return false
}
