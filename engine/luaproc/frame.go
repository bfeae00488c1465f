package luaproc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame kinds (see the package documentation).
const (
	kindHello   = 'H' // child → parent, once: the protocol version
	kindJob     = 'J' // parent → child: limits, then the job
	kindRequest = 'Q' // child → parent: a request during the job
	kindAnswer  = 'A' // parent → child: the answer to the last request
	kindResult  = 'R' // child → parent: the job's result
)

// version is the hello frame's payload; a child saying anything else is not
// spoken to.
const version = "luaproc 3"

// MaxFrame is the largest frame either side accepts: a job, a request, an
// answer or a result.
const MaxFrame = 256 << 20

// Flags of a result frame's first byte.
const (
	resultErr     = 1 << iota // the handler failed: the rest is its message
	resultLimit               // the memory sampler stopped the job
	resultRetired             // the child exits after this frame
)

// Flags of an answer frame's first byte.
const answerErr = 1 // the request failed: the rest is its message

// jobHeaderLen is the length of a job frame's header: the memory limit in
// bytes, big-endian, then a flags byte.
const jobHeaderLen = 9

// jobHeld is the flag of a job whose go-ahead may follow (Pool.RunSent).
const jobHeld = 1

// errFrame is a malformed frame: the other side is not speaking the protocol.
var errFrame = errors.New("luaproc: malformed frame")

// writeFrame writes one frame in a single Write: a 4-byte big-endian length
// of what follows, the kind, then the parts.
func writeFrame(w io.Writer, kind byte, parts ...[]byte) error {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxFrame {
		return fmt.Errorf("luaproc: a frame of %d bytes is over the %d-byte limit", n, MaxFrame)
	}
	buf := make([]byte, 0, 4+n)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	buf = append(buf, kind)
	for _, p := range parts {
		buf = append(buf, p...)
	}
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame. io.EOF means the other side closed the stream
// between frames; a stream cut inside a frame is io.ErrUnexpectedEOF.
func readFrame(r *bufio.Reader) (kind byte, body []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[:4])
	if n == 0 || n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: length %d", errFrame, n)
	}
	body = make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return head[4], body, nil
}
