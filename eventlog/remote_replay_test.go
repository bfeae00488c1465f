package eventlog

import "testing"

// TestReplayDispatchAndLost checks how the records of a run with a hub
// replay (docs/spec.md §8): a DISPATCH makes its attempt count and the
// step dirty, its STEP_START does not count it twice, a LOST leaves it
// dirty and cut off (no longer in flight) for the cleanup the CLEANUP then
// records, and src_seq is tracked.
func TestReplayDispatchAndLost(t *testing.T) {
	recs := []*Record{
		{Seq: 1, EventType: TaskStart, Start: &StartInfo{Version: Version, Steps: []StepInfo{{ID: "a"}}}},
		{Seq: 2, EventType: Dispatch, StepID: "a", RetryCount: 0, Pool: "default"},
	}
	st := Replay("t", recs).Steps["a"]
	if !st.Dirty || !st.Remote || st.Attempts != 1 || st.Status != Running {
		t.Errorf("after DISPATCH: %+v, want dirty, remote, 1 attempt, RUNNING", st)
	}
	recs = append(recs, &Record{Seq: 3, EventType: StepStart, StepID: "a", RetryCount: 0, Worker: "h:1", SrcSeq: 7})
	s := Replay("t", recs)
	if st := s.Steps["a"]; st.Attempts != 1 || !st.Dirty || s.LastSrcSeq != 7 {
		t.Errorf("after its STEP_START: %+v (last src_seq %d), want 1 attempt, dirty, src_seq 7", st, s.LastSrcSeq)
	}
	recs = append(recs, &Record{Seq: 4, EventType: Lost, StepID: "a", RetryCount: 0, SrcSeq: 9, ErrorMessage: "lost"})
	st = Replay("t", recs).Steps["a"]
	if !st.Dirty || !st.Unclean || !st.CutOff || st.LastError != "lost" {
		t.Errorf("after LOST: %+v, want dirty, unclean and cut off (not in flight)", st)
	}
	recs = append(recs, &Record{Seq: 5, EventType: Cleanup, StepID: "a", Status: Pending, Dirty: true})
	if st := Replay("t", recs).Steps["a"]; st.Dirty || st.CutOff {
		t.Errorf("after its CLEANUP: %+v, want neither dirty nor cut off", st)
	}
	recs = append(recs,
		&Record{Seq: 6, EventType: Dispatch, StepID: "a", RetryCount: 1},
		&Record{Seq: 7, EventType: StepStart, StepID: "a", RetryCount: 1, SrcSeq: 11},
		&Record{Seq: 8, EventType: StepEnd, StepID: "a", RetryCount: 1, Status: Success, SrcSeq: 12})
	s = Replay("t", recs)
	if st := s.Steps["a"]; st.Attempts != 2 || st.Dirty || st.Status != Success || st.DirtyRecoveries != 0 || s.LastSrcSeq != 12 {
		t.Errorf("after the rerun: %+v (last src_seq %d), want 2 attempts, SUCCESS, clean, src_seq 12", st, s.LastSrcSeq)
	}
}

// TestEncodeRemoteFields checks that the fields of a remote attempt
// survive a round trip through a line.
func TestEncodeRemoteFields(t *testing.T) {
	in := &Record{Seq: 3, Timestamp: "2026-12-04T00:00:00Z", TaskID: "t", StepID: "a", EventType: StepStart,
		Status: Running, Worker: "host:42:w1", Pool: "gpu", SrcSeq: 1234}
	line, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	if out.Worker != in.Worker || out.Pool != in.Pool || out.SrcSeq != in.SrcSeq {
		t.Errorf("Decode(Encode) = worker %q pool %q src_seq %d, want %q %q %d", out.Worker, out.Pool, out.SrcSeq, in.Worker, in.Pool, in.SrcSeq)
	}
}
