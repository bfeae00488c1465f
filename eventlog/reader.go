package eventlog

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"runtime"
	"sync"
)

// MaxTornTail is the largest run of damaged bytes at the end of a log that
// counts as a torn tail (a crash mid-write) rather than corruption: the
// longest line a writer writes and then some, so that a crash while writing
// the longest TASK_START still leaves a torn tail.
const MaxTornTail = MaxLineBytes + 4096

// CorruptError reports damage that is not a torn tail: a bad line in the
// middle of a log, a gap in seq, or a log that belongs to another task.
// Nothing is written when it is returned. Its message states the damage;
// the caller says what to do (restore the log, or start the task over in a
// new log).
type CorruptError struct {
	Path   string
	Line   int
	Reason string
	// Err is the error that decoding the line returned, nil when the line
	// decoded but is in the wrong place (a gap in seq, another task).
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: %s; the log was damaged after it was written, so nothing was written to it", e.Path, e.Line, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

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
// damage is a *CorruptError. Read never modifies the file. It follows a
// symbolic link at path (reading is harmless, and the path may be one a user
// gave), but reads nothing but a regular file: a named pipe there is an
// *UnsafeFileError, not a reader blocked for ever.
func Read(path string, opts ReadOptions, visit func(*Record) error) (Tail, error) {
	f, err := OpenRegular(path, true)
	if err != nil {
		return Tail{}, fmt.Errorf("open event log: %w", err)
	}
	defer f.Close()
	return read(f, path, opts, visit)
}

// read is Read of the log open as f, from opts.Offset to its end, at least
// the size it has now.
func read(f File, path string, opts ReadOptions, visit func(*Record) error) (Tail, error) {
	fi, err := f.Stat()
	if err != nil {
		return Tail{}, fmt.Errorf("read event log %s: %w", path, err)
	}
	// A prefix (a snapshot) that ends past the log's end is not a prefix
	// of this log; reading on would report an End beyond the file.
	if opts.Offset > fi.Size() {
		return Tail{}, fmt.Errorf("read event log %s: offset %d is past its end (%d bytes)", path, opts.Offset, fi.Size())
	}
	r := io.NewSectionReader(f, opts.Offset, math.MaxInt64-opts.Offset)
	return scan(r, fi.Size()-opts.Offset, path, opts, int(opts.Seq), visit) // one line per seq before Offset
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
// buffer and choose between reading line by line and decoding ahead in
// parallel. lines is the number of lines before opts.Offset, so that errors
// name the line of the file.
func scan(r io.Reader, size int64, path string, opts ReadOptions, lines int, visit func(*Record) error) (Tail, error) {
	tail := Tail{End: opts.Offset, LastSeq: opts.Seq}
	if size >= parallelBytes && runtime.GOMAXPROCS(0) > 1 {
		return scanAhead(r, chunkBytes, path, opts, tail, lines, visit)
	}
	return scanLines(r, int(min(max(size+1, 4<<10), 256<<10)), path, opts, tail, lines, visit)
}

// scanLines reads records from r one line at a time, going on from tail
// and line lineNo; bufSize sizes its buffer.
func scanLines(r io.Reader, bufSize int, path string, opts ReadOptions, tail Tail, lineNo int, visit func(*Record) error) (Tail, error) {
	br := bufio.NewReaderSize(r, bufSize)
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
					return tail, &CorruptError{Path: path, Line: lineNo, Err: err,
						Reason: fmt.Sprintf("%v; the line holds record seq %d and another: the line end after it was damaged", err, r.Seq)}
				}
			}
			tail.Torn = int64(len(line))
			return tail, nil
		}
		rec, err := decode(line[:len(line)-1], &a)
		if err != nil {
			bad := &CorruptError{Path: path, Line: lineNo, Reason: err.Error(), Err: err}
			first := lineNo == 1 && opts.Offset == 0
			torn, err := classifyTail(br, bytes.Clone(line), first, bad, tail, opts.TaskID)
			tail.Torn = torn
			return tail, err
		}
		if reason := misplaced(rec, tail, opts, lineNo); reason != "" {
			// The line decoded fine but is in the wrong place: never a crash artifact.
			return tail, &CorruptError{Path: path, Line: lineNo, Reason: reason}
		}
		tail.add(rec, len(line))
		if err := visit(rec); err != nil {
			return tail, err
		}
	}
}

// misplaced returns why a record that decoded is not the good next one after
// tail, on line lineNo; "" if it is.
func misplaced(rec *Record, tail Tail, opts ReadOptions, lineNo int) string {
	if opts.TaskID != "" && rec.TaskID != opts.TaskID {
		return fmt.Sprintf("record belongs to task %q, not %q", rec.TaskID, opts.TaskID)
	}
	if rec.Seq != tail.LastSeq+1 {
		return fmt.Sprintf("seq %d follows %d", rec.Seq, tail.LastSeq)
	}
	if lineNo == 1 && opts.Offset == 0 {
		if rec.EventType != TaskStart || rec.Start == nil {
			return fmt.Sprintf("first record is %s, not a TASK_START", rec.EventType)
		}
	}
	return ""
}

// add counts rec, read from a line of n bytes, newline included.
func (t *Tail) add(rec *Record, n int) {
	if rec.EventType == TaskStart && rec.Start != nil && rec.Start.Version > t.Version {
		t.Version = rec.Start.Version
	}
	t.End += int64(n)
	t.Lines++
	t.LastSeq = rec.Seq
}

// A log of parallelBytes or more is read in chunks of chunkBytes of whole
// lines, which workers check and decode while the reader reads on and the
// caller visits the records before: decoding is most of a replay's work,
// and a machine has more than one core.
const (
	parallelBytes = 4 << 20
	chunkBytes    = 1 << 20
	aheadChunks   = 6 // chunks read ahead of the one being visited
	maxWorkers    = 4 // goroutines decoding chunks, at most one a core
)

// chunk is a run of whole lines read ahead. A worker fills recs, one per
// line (nil where the line does not decode), and ends, where each line ends
// in data, then closes done.
type chunk struct {
	data []byte
	recs []*Record
	ends []int
	done chan struct{}
}

// readAhead reads a log in chunks, and has them decoded, for scanAhead.
type readAhead struct {
	r       io.Reader
	size    int           // the chunk size
	ordered chan *chunk   // every chunk, in order, for the caller; closed at the end
	work    chan *chunk   // every chunk, for the workers
	free    chan []byte   // buffers of visited chunks, to read into again
	quit    chan struct{} // closed when the caller stops
	done    sync.WaitGroup

	// Once ordered is closed: the bytes read but not passed on in a chunk
	// (those after the last whole line, or all of a chunk the reader held
	// when it was stopped), and the read error that stopped it (nil at the
	// end of r).
	rest []byte
	err  error
}

// scanAhead is scanLines for big logs: it visits the records that chunks
// of whole lines decode to, in order. At the first line that is not a good
// next record, and at the end if a part of a line is left, it hands the rest
// of the log over to scanLines, which reports it as it always does.
func scanAhead(r io.Reader, size int, path string, opts ReadOptions, tail Tail, lineNo int, visit func(*Record) error) (Tail, error) {
	ra := &readAhead{r: r, size: size, ordered: make(chan *chunk, aheadChunks), work: make(chan *chunk, aheadChunks),
		free: make(chan []byte, aheadChunks+2), quit: make(chan struct{})}
	workers := min(runtime.GOMAXPROCS(0), maxWorkers)
	ra.done.Add(1 + workers)
	go ra.read()
	for range workers {
		go ra.decode()
	}
	defer ra.stop()
	for c := range ra.ordered {
		<-c.done
		from := 0
		for i, rec := range c.recs {
			if rec == nil || misplaced(rec, tail, opts, lineNo+1) != "" {
				return scanLines(ra.handOver(c.data[from:]), 256<<10, path, opts, tail, lineNo, visit)
			}
			lineNo++
			tail.add(rec, c.ends[i]-from)
			from = c.ends[i]
			if err := visit(rec); err != nil {
				return tail, err
			}
		}
		if cap(c.data) <= 2*size { // not one grown for a long line: that one may go
			select {
			case ra.free <- c.data[:cap(c.data)]:
			default:
			}
		}
	}
	if len(ra.rest) > 0 || ra.err != nil {
		return scanLines(ra.handOver(nil), 256<<10, path, opts, tail, lineNo, visit)
	}
	return tail, nil
}

// read reads r into chunks of whole lines until its end, an error or quit.
func (ra *readAhead) read() {
	defer ra.done.Done()
	defer close(ra.work)
	defer close(ra.ordered)
	size := ra.size
	var carry []byte // the start of a line, read with the chunk before
	for {
		need := max(size, 2*len(carry)) // room for the line begun and more
		var buf []byte
		select {
		case buf = <-ra.free:
		default:
		}
		if len(buf) < need {
			buf = make([]byte, need)
		}
		n := copy(buf, carry)
		m, err := io.ReadFull(ra.r, buf[n:])
		n += m
		data := buf[:n]
		cut := bytes.LastIndexByte(data, '\n') + 1
		if err == nil && cut == 0 && n <= MaxLineBytes {
			// A line longer than a chunk: read on into a bigger one.
			carry = append(carry[:0], data...)
			size = min(2*size, MaxLineBytes+1)
			continue
		}
		carry = append(carry[:0], data[cut:]...)
		size = ra.size
		end := err != nil
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = nil
		}
		if cut > 0 {
			// Stopped, the reader leaves what it read but did not pass on
			// as the rest, for handOver.
			c := &chunk{data: data[:cut], done: make(chan struct{})}
			select {
			case ra.ordered <- c:
			case <-ra.quit:
				ra.rest, ra.err = data, err
				return
			}
			select {
			case ra.work <- c:
			case <-ra.quit:
				ra.rest, ra.err = carry, err
				return
			}
		}
		if end || cut == 0 {
			ra.rest, ra.err = carry, err
			return
		}
	}
}

// decode decodes chunks, line by line, until there are no more.
func (ra *readAhead) decode() {
	defer ra.done.Done()
	var a arena
	for c := range ra.work {
		select {
		case <-ra.quit:
		default:
			for from := 0; from < len(c.data); {
				end := from + bytes.IndexByte(c.data[from:], '\n') + 1
				rec, _ := decode(c.data[from:end-1], &a)
				c.recs = append(c.recs, rec)
				c.ends = append(c.ends, end)
				from = end
			}
		}
		close(c.done)
	}
}

// handOver stops reading ahead and returns the log from where the caller
// stopped: first, the rest of the chunk it was visiting, then the chunks
// read ahead, the part of a line after them, and what r still holds.
func (ra *readAhead) handOver(first []byte) io.Reader {
	ra.stop()
	parts := []io.Reader{bytes.NewReader(first)}
	for c := range ra.ordered {
		parts = append(parts, bytes.NewReader(c.data))
	}
	parts = append(parts, bytes.NewReader(ra.rest))
	if ra.err != nil {
		parts = append(parts, errReader{ra.err})
	} else {
		parts = append(parts, ra.r)
	}
	return io.MultiReader(parts...)
}

// stop ends reading ahead and waits for the reader and the workers to
// stop. It may be called again.
func (ra *readAhead) stop() {
	select {
	case <-ra.quit:
		return
	default:
	}
	close(ra.quit)
	ra.done.Wait()
}

// errReader returns its error.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// classifyTail decides whether the bad line and everything after it is a
// torn tail (a crash artifact, not too long) or corruption, reported as
// bad. It returns the torn tail's size. A torn tail holds no good record,
// unless the bad line is what a power cut leaves of appends written but
// not yet fsynced when the file system persisted a later block before an
// earlier one: zeros from the line's start up to a block boundary (the
// block that never reached the disk), then the rest of the line; every
// good record after it is then this task's and later than the next one
// (reorderedTail), none of it durable, and all of it is cut. tail is what
// was read before the bad line, taskID the task every record must be of
// ("" when not checked). first says the bad line is the log's first: then
// only that one line may be torn, since the first record is fsynced before
// anything else is written.
func classifyTail(br *bufio.Reader, badLine []byte, first bool, bad *CorruptError, tail Tail, taskID string) (int64, error) {
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
	reordered := zerosToBlock(badLine, tail.End)
	for _, l := range bytes.Split(rest, []byte("\n")) {
		r, err := Decode(l)
		if err != nil {
			r = splitRecord(l)
		}
		if r == nil {
			continue
		}
		if reordered && err == nil && r.Seq > tail.LastSeq+1 && (taskID == "" || r.TaskID == taskID) {
			continue // a later append that reached the disk before the one cut off
		}
		bad.Reason += fmt.Sprintf("; a good record (seq %d) follows the damage", r.Seq)
		return 0, bad
	}
	return size, nil
}

// tornBlock is the unit in which a file system persists a file's data: a
// disk sector. A block that never reached the disk reads as zeros.
const tornBlock = 512

// zerosToBlock reports whether line, which starts at offset start in the
// file, begins with zero bytes that run to a block boundary: the mark of a
// block lost by a power cut while a later one of the same unsynced appends
// was persisted. Damage by other means (a flipped bit, an edit) does not
// leave a run of zeros ending exactly on a boundary.
func zerosToBlock(line []byte, start int64) bool {
	z := 0
	for z < len(line) && line[z] == 0 {
		z++
	}
	return z > 0 && (start+int64(z))%tornBlock == 0
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
