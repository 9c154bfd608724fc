package main

// What every stub program shares: who it is (Pod name and IP), what it was given (argv, env), the
// confinement it runs under, the response headers naming it, and a graceful stop on SIGTERM.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Headers every response carries, so a test sees which Pod (and which stub program) answered.
const (
	headerPod         = "X-Stub-Pod"
	headerRole        = "X-Stub-Role"
	headerPrefillPod  = "X-Stub-Prefill-Pod"
	headerDecodePod   = "X-Stub-Decode-Pod"
	headerRouterPod   = "X-Stub-Router-Pod"
	headerPrefilledBy = "X-Stub-Prefilled-By" // router -> decoder: which Pod ran the prefill step
)

var (
	hostname, _ = os.Hostname()
	startedAt   = time.Now()
)

// podIP is the first non-loopback IPv4 address: the Pod IP inside a Pod's network namespace
// (STUB_LISTEN_HOST when set: see listenHost).
func podIP() string {
	if h := os.Getenv("STUB_LISTEN_HOST"); h != "" {
		return h
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func environ() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// security is what the hardened securityContext must have produced, read from inside (so a test
// needs no `kubectl exec`): ids, no_new_privs, the seccomp mode, capabilities, and whether a
// service-account token was mounted.
func security() map[string]any {
	out := map[string]any{"uid": os.Getuid(), "gid": os.Getgid()}
	if raw, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch k {
			case "NoNewPrivs", "Seccomp", "Seccomp_filters", "CapEff", "CapBnd", "CapPrm":
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	out["service_account_token"] = err == nil
	// Whether the root filesystem is writable (readOnlyRootFilesystem), tried in a throwaway name.
	probe := fmt.Sprintf("/.stub-write-probe-%d", os.Getpid())
	if f, err := os.Create(probe); err == nil {
		f.Close()
		os.Remove(probe)
		out["root_writable"] = true
	} else {
		out["root_writable"] = false
	}
	return out
}

func envSeconds(name string, fallback float64) time.Duration {
	if v := os.Getenv(name); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			die(2, "stub: %s=%q is not a number of seconds", name, v)
		}
		return time.Duration(f * float64(time.Second))
	}
	return time.Duration(fallback * float64(time.Second))
}

func envInt(name string, fallback int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			die(2, "stub: %s=%q is not an integer", name, v)
		}
		return n
	}
	return fallback
}

// listenHost is the address a program listens on: STUB_LISTEN_HOST, when set, stands for the
// Pod's IP and its loopback together (local tests run each "Pod" on its own 127.0.0.x, so every
// rendered port stays as rendered); else the rendered host.
func listenHost(rendered string) string {
	if h := os.Getenv("STUB_LISTEN_HOST"); h != "" {
		return h
	}
	return rendered
}

// localHost is where a program reaches a neighbour in its own Pod (127.0.0.1, or STUB_LISTEN_HOST).
func localHost() string {
	return listenHost("127.0.0.1")
}

// listenPort is the port a program was told to listen on; STUB_LISTEN_PORT overrides it (local
// tests, where the rendered port may be taken).
func listenPort(rendered int) int {
	return envInt("STUB_LISTEN_PORT", rendered)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	_ = enc.Encode(v)
}

// openAIError answers in the engines' error shape.
func openAIError(w http.ResponseWriter, code int, kind, message string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": message, "type": kind, "code": code}, "object": "error",
		"message": message, "type": kind, "code": code})
}

// counter counts requests served, for /stub/info.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// named wraps a handler: every response names the Pod and the role, and every request is counted.
func named(role func() string, served *counter, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(headerPod, hostname)
		w.Header().Set(headerRole, role())
		served.inc()
		h.ServeHTTP(w, r)
	})
}

// serve runs servers until SIGTERM/SIGINT, then drains them (in-flight requests finish, as the
// engines' uvicorn does) and exits 0. onStop runs first (e.g. /health turns 503 while draining).
func serve(onStop func(), servers ...*http.Server) {
	errs := make(chan error, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			die(1, "stub: cannot listen on %s: %v", s.Addr, err)
		}
		log.Printf("listening on %s", ln.Addr())
		go func(s *http.Server) { errs <- s.Serve(ln) }(s)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-stop:
		log.Printf("%s: draining", sig)
	case err := <-errs:
		die(1, "stub: server stopped: %v", err)
	}
	if onStop != nil {
		onStop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), envSeconds("STUB_DRAIN_SECONDS", 20))
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	log.Printf("stopped")
	os.Exit(0)
}

// exitHandler: POST /stub/exit?code=N makes the program exit with N after answering (a crashing
// engine, for the restart story, without `kubectl exec`).
func exitHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	code, err := strconv.Atoi(r.URL.Query().Get("code"))
	if err != nil {
		code = 1
	}
	writeJSON(w, 200, map[string]any{"exiting": code})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		log.Printf("exiting with %d as asked by /stub/exit", code)
		os.Exit(code)
	}()
}

func init() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetOutput(os.Stdout)
	log.SetPrefix("stub ")
}
