package web

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics registers what /metrics exports: Go's and the process's own, and
// the runs' figures, computed at each scrape from the index (no log is read
// for a finished run: the index keeps its figures).
func (s *Server) metrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(&runsCollector{s: s})
	return reg
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

var (
	descRuns = prometheus.NewDesc("apollo_runs", "Task runs (one per log) in the state folder, by status.",
		[]string{"state_dir", "status"}, nil)
	descAttempts = prometheus.NewDesc("apollo_step_attempts_total", "Step attempts recorded in the logs, by result "+
		"(success, failed, retried, timed_out, interrupted, skipped).", []string{"state_dir", "result"}, nil)
	descDuration = prometheus.NewDesc("apollo_step_duration_seconds", "Duration of the step attempts recorded in the logs.",
		[]string{"state_dir"}, nil)
	descLastSuccess = prometheus.NewDesc("apollo_pipeline_last_success_timestamp_seconds",
		"When the newest succeeded run of each pipeline (task_name) ended, Unix seconds.", []string{"state_dir", "task_name"}, nil)
	descSinceSuccess = prometheus.NewDesc("apollo_pipeline_seconds_since_last_success",
		"Seconds since the newest succeeded run of each pipeline (task_name) ended.", []string{"state_dir", "task_name"}, nil)
	descLag = prometheus.NewDesc("apollo_schedule_lag_seconds",
		"How late the last scheduled run of each pipeline started after its scheduled time.", []string{"pipeline"}, nil)
	descFsyncs = prometheus.NewDesc("apollo_log_fsyncs_total",
		"Fsyncs of the event logs, as the runners counted them in their TASK_SUMMARY.", []string{"state_dir"}, nil)
	descFsyncTime = prometheus.NewDesc("apollo_log_fsync_seconds_total",
		"Time the runners' fsyncs of the event logs took, from their TASK_SUMMARY.", []string{"state_dir"}, nil)
	descFsyncMax = prometheus.NewDesc("apollo_log_fsync_max_seconds",
		"The longest fsync of an event log any runner recorded.", []string{"state_dir"}, nil)
	descPages = prometheus.NewDesc("apollo_serve_live_pages", "Pages open with live updates.", nil, nil)
)

// runsCollector computes the runs' metrics at each scrape.
type runsCollector struct{ s *Server }

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descAttempts, descDuration, descLastSuccess, descSinceSuccess,
		descLag, descFsyncs, descFsyncTime, descFsyncMax, descPages} {
		ch <- d
	}
}

type dirFigures struct {
	status   map[string]int
	attempts map[string]int
	buckets  []uint64
	sum      float64
	count    uint64
	last     map[string]time.Time
	fsyncs   int64
	fsyncUS  int64
	fsyncMax int64
}

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	figs := make([]*dirFigures, len(s.dirs))
	for i := range figs {
		figs[i] = &dirFigures{status: map[string]int{}, attempts: map[string]int{},
			buckets: make([]uint64, len(durationBuckets)+1), last: map[string]time.Time{}}
	}
	for _, r := range s.ix.list() {
		if s.ix.shadowed(r) {
			continue
		}
		ri := s.ix.entry(r)
		f := figs[r.key.SD]
		f.status[ri.Status]++
		r.mu.Lock()
		for k, v := range r.stats.Attempts {
			f.attempts[k] += v
		}
		for i, v := range r.stats.Buckets {
			f.buckets[i] += v
		}
		f.sum += r.stats.DurSum
		f.count += r.stats.DurCount
		f.fsyncs += r.stats.Fsyncs
		f.fsyncUS += r.stats.FsyncUS
		f.fsyncMax = max(f.fsyncMax, r.stats.FsyncMax)
		r.mu.Unlock()
		if ri.Status == "succeeded" && ri.TaskName != "" {
			if t, err := time.Parse(time.RFC3339Nano, ri.LastEvent); err == nil && t.After(f.last[ri.TaskName]) {
				f.last[ri.TaskName] = t
			}
		}
	}
	now := s.opts.Now()
	for i, f := range figs {
		dir := s.dirName(i)
		for _, st := range []string{"running", "succeeded", "failed", "interrupted", "unfinished", "corrupt"} {
			ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(f.status[st]), dir, st)
		}
		for _, res := range []string{"success", "failed", "retried", "timed_out", "interrupted", "skipped"} {
			ch <- prometheus.MustNewConstMetric(descAttempts, prometheus.CounterValue, float64(f.attempts[res]), dir, res)
		}
		cum := map[float64]uint64{}
		var acc uint64
		for j, ub := range durationBuckets {
			acc += f.buckets[j]
			cum[ub] = acc
		}
		ch <- prometheus.MustNewConstHistogram(descDuration, f.count, f.sum, cum, dir)
		for name, t := range f.last {
			ch <- prometheus.MustNewConstMetric(descLastSuccess, prometheus.GaugeValue, float64(t.UnixNano())/1e9, dir, name)
			ch <- prometheus.MustNewConstMetric(descSinceSuccess, prometheus.GaugeValue, now.Sub(t).Seconds(), dir, name)
		}
		ch <- prometheus.MustNewConstMetric(descFsyncs, prometheus.CounterValue, float64(f.fsyncs), dir)
		ch <- prometheus.MustNewConstMetric(descFsyncTime, prometheus.CounterValue, float64(f.fsyncUS)/1e6, dir)
		ch <- prometheus.MustNewConstMetric(descFsyncMax, prometheus.GaugeValue, float64(f.fsyncMax)/1e6, dir)
	}
	if s.opts.Scheduler != nil {
		for p, lag := range s.opts.Scheduler.Lags() {
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, lag.Seconds(), p)
		}
	}
	ch <- prometheus.MustNewConstMetric(descPages, prometheus.GaugeValue, float64(s.hub.count()))
}
