package web

import (
	"os"
	"sync"
	"time"
)

// poller is the watcher where inotify is not available: once a second it
// compares the size and time of the entries of each watched folder with
// what it saw last.
type poller struct {
	out  chan change
	stop chan struct{}

	mu   sync.Mutex
	dirs map[string]map[string]string // folder -> entry -> size and time
}

func newPoller() *poller {
	p := &poller{out: make(chan change, 256), stop: make(chan struct{}), dirs: map[string]map[string]string{}}
	go p.loop()
	return p
}

func (p *poller) add(dir string) error {
	seen, err := p.look(dir)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.dirs[dir] = seen
	p.mu.Unlock()
	return nil
}

func (p *poller) look(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]string, len(entries))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			seen[e.Name()] = itoa(int(fi.Size())) + "@" + fi.ModTime().String()
		}
	}
	return seen, nil
}

func (p *poller) changes() <-chan change { return p.out }

func (p *poller) close() error {
	close(p.stop)
	return nil
}

func (p *poller) loop() {
	defer close(p.out)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		dirs := make([]string, 0, len(p.dirs))
		for d := range p.dirs {
			dirs = append(dirs, d)
		}
		p.mu.Unlock()
		for _, d := range dirs {
			now, err := p.look(d)
			if err != nil {
				continue
			}
			p.mu.Lock()
			before := p.dirs[d]
			p.dirs[d] = now
			p.mu.Unlock()
			for name, v := range now {
				if before[name] != v {
					p.send(change{d, name})
				}
			}
			for name := range before {
				if _, ok := now[name]; !ok {
					p.send(change{d, name})
				}
			}
		}
	}
}

func (p *poller) send(c change) {
	select {
	case p.out <- c:
	default:
	}
}
