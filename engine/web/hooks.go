package web

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"apollo/engine/cron"
	"apollo/eventlog"
)

// hooksPrefix starts the webhook routes: POST /hooks/NAME. They answer
// without a signed-in user — a delivery is authenticated by its signature
// alone (cron.Scheduler.Hook) — but under the same Host rules as every
// page.
const hooksPrefix = "/hooks/"

// postHook hands a webhook delivery, its body bounded, to the scheduler.
func (s *Server) postHook(w http.ResponseWriter, r *http.Request) {
	sched := s.opts.Scheduler
	if sched == nil {
		why := s.opts.NoScheduler
		if why == "" {
			why = "this apollo serve runs no schedules"
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": why})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cron.MaxHookBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "the body is over 1 MiB"})
			return
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "read the body: " + err.Error()})
		return
	}
	res := sched.Hook(r.Context(), r.PathValue("name"), r.Header, body)
	if res.Status >= 400 {
		s.opts.Logf("apollo serve: POST %s: %d %v", r.URL.Path, res.Status, res.Body["error"])
	}
	writeJSON(w, res.Status, res.Body)
}

// isHook reports whether a request is a webhook delivery.
func isHook(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, hooksPrefix)
}

// triggerOf says what trigger started a run, from the trigger.* vars apollo
// serve gave it (its TASK_START's vars); "" for a run no trigger started.
func triggerOf(start *eventlog.StartInfo) string {
	if start == nil {
		return ""
	}
	v := start.Vars
	switch v["trigger.kind"] {
	case cron.TriggerAfter:
		return fmt.Sprintf("after %s: its task %s ended (%s)", v["trigger.pipeline"], v["trigger.task_id"], v["trigger.status"])
	case cron.TriggerFile:
		return "file " + v["trigger.path"]
	case cron.TriggerWebhook:
		return fmt.Sprintf("webhook %s (POST /hooks/%s), delivery %s", v["trigger.webhook"], v["trigger.webhook"], v["trigger.delivery"])
	}
	return ""
}
