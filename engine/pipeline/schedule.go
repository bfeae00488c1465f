package pipeline

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones by name on machines without a zoneinfo database

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"
)

// Catch-up policies: what apollo serve does with the times a schedule
// passed while it was not running (docs/spec.md §9).
const (
	CatchupNone   = "none"
	CatchupLatest = "latest"
	CatchupAll    = "all"
)

// Overlap policies: what apollo serve does when a scheduled time comes while
// a run it started for the pipeline is still going.
const (
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
)

// maxCatchupLimit bounds catchup_limit.
const maxCatchupLimit = 10_000

// Schedule is a pipeline's schedule: when apollo serve runs it.
type Schedule struct {
	// Cron is the expression as written: five fields (minute hour
	// day-of-month month day-of-week) or a shorthand such as @daily.
	Cron string
	// TimeZone is the IANA name the expression is read in; "UTC" unless set.
	TimeZone string
	// Catchup is none, latest or all; CatchupLimit caps all.
	Catchup      string
	CatchupLimit int
	// Overlap is skip or queue.
	Overlap string
	Line    int

	loc  *time.Location
	spec cron.Schedule
}

// scheduleKeys are the keys of the schedule mapping, in the order
// suggestions prefer them.
var scheduleKeys = []string{"cron", "timezone", "catchup", "catchup_limit", "overlap"}

// cronParser reads standard five-field expressions and the @ shorthands.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron reads a cron expression (five fields, or @yearly, @monthly,
// @weekly, @daily, @midnight, @hourly) in the time zone named tz ("" is UTC).
// It is the parser the schedule: key uses.
func ParseCron(expr, tz string) (*Schedule, error) {
	s := &Schedule{Cron: expr, TimeZone: tz, Catchup: CatchupLatest, CatchupLimit: 10, Overlap: OverlapSkip}
	if err := s.compile(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Schedule) compile() error {
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil || s.TimeZone == "Local" {
		return fmt.Errorf("timezone %q is not a time zone name; write one like UTC or Europe/Paris", s.TimeZone)
	}
	expr := strings.TrimSpace(s.Cron)
	switch {
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return fmt.Errorf("cron %q names its time zone inside; use the timezone key instead", s.Cron)
	case strings.HasPrefix(expr, "@every"):
		return fmt.Errorf("cron %q: @every has no fixed times to catch up; write a cron expression such as */15 * * * *", s.Cron)
	}
	spec, err := cronParser.Parse(expr)
	if err != nil {
		return fmt.Errorf("cron %q is not a cron expression (minute hour day-of-month month day-of-week, or @daily, @hourly, ...): %v", s.Cron, err)
	}
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return fmt.Errorf("cron %q never fires", s.Cron)
	}
	s.loc, s.spec = loc, spec
	return nil
}

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next returns the first scheduled time after t, in the schedule's time
// zone; the zero time if there is none.
func (s *Schedule) Next(t time.Time) time.Time { return s.spec.Next(t.In(s.loc)) }

// Date is the task_date of the run scheduled at t: its date in the
// schedule's time zone.
func (s *Schedule) Date(t time.Time) string { return t.In(s.loc).Format("2006-01-02") }

// SubDaily reports whether the expression fires more than once on some
// date, so that a run's task id must name its time as well as its date. It
// is read in UTC: a daily time that a clock change repeats (02:30 on the
// night clocks go back) does not make a schedule sub-daily; the repeat
// finds its task already run.
func (s *Schedule) SubDaily() bool {
	t := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := ""
	for range 800 { // over two years: every month and weekday, leap days aside
		t = s.spec.Next(t)
		if t.IsZero() {
			return false
		}
		d := t.Format("2006-01-02")
		if d == prev {
			return true
		}
		prev = d
	}
	return false
}

// schedule decodes the top-level schedule key: a cron expression, or a
// mapping of cron, timezone, catchup, catchup_limit and overlap.
func (l *loader) schedule(kv keyValue) {
	top := l.top()
	n := deref(kv.v)
	s := &Schedule{Catchup: CatchupLatest, CatchupLimit: 10, Overlap: OverlapSkip, Line: kv.k.Line}
	exprLine := n.Line
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			top.errf(n.Line, "schedule has no value; give a cron expression such as \"0 2 * * *\" or @daily, or remove the key")
			return
		}
		expr, ok := top.nonEmpty("schedule", n)
		if !ok {
			return
		}
		s.Cron = expr
	case yaml.MappingNode:
		ok := true
		for _, p := range top.pairs(n) {
			key := "schedule." + p.key
			switch p.key {
			case "cron":
				s.Cron, ok = top.nonEmpty(key, p.v)
				exprLine = deref(p.v).Line
			case "timezone":
				s.TimeZone, ok = top.nonEmpty(key, p.v)
			case "catchup":
				s.Catchup, ok = top.choice(key, p.v, CatchupNone, CatchupLatest, CatchupAll)
			case "catchup_limit":
				s.CatchupLimit, ok = top.integer(key, p.v, 1, maxCatchupLimit)
			case "overlap":
				s.Overlap, ok = top.choice(key, p.v, OverlapSkip, OverlapQueue)
			default:
				top.unknownKey(p.k, scheduleKeys, map[string]string{"tz": "timezone", "time_zone": "timezone",
					"expression": "cron", "at": "cron", "catch_up": "catchup", "concurrency": "overlap"})
				ok = false
			}
			if !ok {
				return
			}
		}
		if s.Cron == "" {
			top.errf(n.Line, "schedule has no cron; add cron: \"0 2 * * *\" (or @daily) under schedule:")
			return
		}
	default:
		top.errf(n.Line, "schedule must be a cron expression or a mapping with cron, not %s", describe(n))
		return
	}
	if err := s.compile(); err != nil {
		top.errf(exprLine, "schedule: %v", err)
		return
	}
	l.p.Schedule = s
}
