package hub

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckRefusesOpenAddresses: an address other hosts can reach needs
// credentials, for clients and for routes; loopback does not.
func TestCheckRefusesOpenAddresses(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string // "" for accepted
	}{
		{Options{StoreDir: "s"}, ""},
		{Options{StoreDir: "s", Listen: "127.0.0.1:4999"}, ""},
		{Options{StoreDir: "s", Listen: "0.0.0.0:4222"}, "not a loopback address, and no credentials are set"},
		{Options{StoreDir: "s", Listen: "0.0.0.0:4222", TokenFile: "t"}, ""},
		{Options{StoreDir: "s", Listen: "0.0.0.0:4222", TLSCert: "c", TLSKey: "k"}, "no credentials are set"},
		{Options{StoreDir: "s", Cluster: "10.0.0.1:6222", NKeysFile: "n"}, "routes between hubs have no credentials"},
		{Options{StoreDir: "s", Routes: []string{"127.0.0.1:6222"}}, "--routes needs --cluster"},
		{Options{Listen: "127.0.0.1:4222"}, "--store DIR is required"},
	} {
		err := c.o.check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want accepted", c.o, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}

// TestReadNKeys: a coordinator may do everything; a worker only its pools;
// every mistake names the file's line.
func TestReadNKeys(t *testing.T) {
	const coord, worker = "UCOORDINATORKEY", "UWORKERKEY"
	path := filepath.Join(t.TempDir(), "clients")
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# clients\ncoordinator " + coord + "\nworker " + worker + " gpu,cpu  # two pools\n")
	users, err := readNKeys(path)
	if err != nil || len(users) != 2 {
		t.Fatalf("readNKeys = %v, %v", users, err)
	}
	if users[0].Nkey != coord || users[0].Permissions != nil {
		t.Errorf("coordinator: %+v, want every permission", users[0])
	}
	pub := users[1].Permissions.Publish.Allow
	if !slices.ContainsFunc(pub, func(s string) bool { return strings.HasSuffix(s, "pool_gpu") }) ||
		!slices.ContainsFunc(pub, func(s string) bool { return strings.HasSuffix(s, "pool_cpu") }) ||
		slices.ContainsFunc(pub, func(s string) bool { return strings.HasSuffix(s, "pool_default") }) {
		t.Errorf("worker of gpu,cpu may publish to %v", pub)
	}
	for text, want := range map[string]string{
		"worker " + worker + " g.pu\n":      ":1: pool \"g.pu\" may only hold",
		"\ncoordinator " + coord + " gpu\n": ":2: a coordinator has no pools",
		"admin " + coord + "\n":             ":1: role \"admin\"",
		"worker NOTAUSERKEY\n":              ":1: expected \"coordinator PUBLIC_NKEY\"",
		"# nobody\n":                        "lists no client",
	} {
		write(text)
		if _, err := readNKeys(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

// TestServerFsyncsEveryWrite: the embedded server acknowledges no write
// before it is fsynced (docs/research: the default loses acknowledged
// writes when a machine loses power), and it is not what an option
// forgot: every node of every hub is started from these settings.
func TestServerFsyncsEveryWrite(t *testing.T) {
	for _, o := range []Options{{Listen: "127.0.0.1:4222"}, {Listen: "127.0.0.1:0", Name: "n1", StoreDir: t.TempDir()}} {
		if sopts := serverOptions(o); !sopts.SyncAlways || !sopts.JetStream {
			t.Errorf("serverOptions(%+v): SyncAlways %v, JetStream %v; want both", o, sopts.SyncAlways, sopts.JetStream)
		}
	}
}
