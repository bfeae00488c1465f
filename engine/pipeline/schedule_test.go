package pipeline

import (
	"strings"
	"testing"
	"time"
)

// TestScheduleKey loads the schedule: key in each of its forms and checks
// what a run on schedule would use: the policies and the next times.
func TestScheduleKey(t *testing.T) {
	from := time.Date(2026, 11, 1, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		name     string
		yaml     string
		want     Schedule
		next     []string // the first scheduled times after from, RFC 3339
		subDaily bool
	}{
		{"shorthand", `"@daily"`, Schedule{Cron: "@daily", TimeZone: "UTC", Catchup: "latest", CatchupLimit: 10, Overlap: "skip"},
			[]string{"2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z"}, false},
		{"five fields", `"*/20 9-10 * * 1-5"`, Schedule{Cron: "*/20 9-10 * * 1-5", TimeZone: "UTC", Catchup: "latest", CatchupLimit: 10, Overlap: "skip"},
			[]string{"2026-11-02T09:00:00Z", "2026-11-02T09:20:00Z"}, true},
		{"mapping", "\n  cron: \"0 2 * * *\"\n  timezone: Europe/Paris\n  catchup: all\n  catchup_limit: 30\n  overlap: queue",
			Schedule{Cron: "0 2 * * *", TimeZone: "Europe/Paris", Catchup: "all", CatchupLimit: 30, Overlap: "queue"},
			[]string{"2026-11-02T02:00:00+01:00", "2026-11-03T02:00:00+01:00"}, false},
		{"hourly", "{cron: \"@hourly\", catchup: none}", Schedule{Cron: "@hourly", TimeZone: "UTC", Catchup: "none", CatchupLimit: 10, Overlap: "skip"},
			[]string{"2026-11-01T13:00:00Z", "2026-11-01T14:00:00Z"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "task_name: t\nschedule: " + tt.yaml + "\nsteps:\n  - id: a\n    command: echo hi\n"
			p, err := parse("pipeline.yaml", "/x", []byte(src), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := p.Schedule
			if s == nil {
				t.Fatal("Schedule = nil")
			}
			got := Schedule{Cron: s.Cron, TimeZone: s.TimeZone, Catchup: s.Catchup, CatchupLimit: s.CatchupLimit, Overlap: s.Overlap}
			if got != tt.want {
				t.Errorf("schedule = %+v, want %+v", got, tt.want)
			}
			at := from
			for i, want := range tt.next {
				at = s.Next(at)
				if got := at.Format(time.RFC3339); got != want {
					t.Errorf("next #%d = %s, want %s", i+1, got, want)
				}
			}
			if got := s.SubDaily(); got != tt.subDaily {
				t.Errorf("SubDaily() = %v, want %v", got, tt.subDaily)
			}
		})
	}
}

// TestScheduleDate checks that task_date is the date in the schedule's
// time zone, not in UTC.
func TestScheduleDate(t *testing.T) {
	s, err := ParseCron("30 23 * * *", "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	at := s.Next(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	if got, want := s.Date(at), "2026-10-31"; got != want {
		t.Errorf("Date(%s) = %s, want %s", at.UTC().Format(time.RFC3339), got, want)
	}
}

// TestScheduleBad checks every way a schedule can be wrong is reported
// with its line.
func TestScheduleBad(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{`"61 * * * *"`, `pipeline.yaml:2: schedule: cron "61 * * * *" is not a cron expression`},
		{`"@every 1h"`, `@every has no fixed times to catch up`},
		{`"CRON_TZ=UTC 0 2 * * *"`, `use the timezone key instead`},
		{`"0 2 30 2 *"`, `never fires`},
		{"\n  cron: \"@daily\"\n  timezone: Mars/Olympus", `pipeline.yaml:3: schedule: timezone "Mars/Olympus" is not a time zone name`},
		{"\n  cron: \"@daily\"\n  timezone: Local", `timezone "Local" is not a time zone name`},
		{"\n  cron: \"@daily\"\n  catchup: some", `pipeline.yaml:4: schedule.catchup must be none, latest or all, not "some"`},
		{"\n  cron: \"@daily\"\n  overlap: wait", `schedule.overlap must be skip or queue`},
		{"\n  cron: \"@daily\"\n  catchup_limit: 0", `schedule.catchup_limit must be at least 1`},
		{"\n  cron: \"@daily\"\n  tz: UTC", `pipeline.yaml:4: unknown key "tz" (did you mean "timezone"?)`},
		{"\n  timezone: UTC", `pipeline.yaml:3: schedule has no cron`},
		{"", `schedule has no value`},
		{"[a]", `schedule must be a cron expression or a mapping with cron, not a list`},
	}
	for _, tt := range tests {
		src := "task_name: t\nschedule: " + tt.yaml + "\nsteps:\n  - id: a\n    command: echo hi\n"
		_, err := parse("pipeline.yaml", "/x", []byte(src), LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("schedule: %s\n  error %v\n  want it to hold %q", tt.yaml, err, tt.want)
		}
	}
}
