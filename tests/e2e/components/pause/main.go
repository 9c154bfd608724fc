// The real node's sandbox ("pause") image: the process that holds a Pod's namespaces. Built
// here because the machines reach no container registry. Without arguments it behaves like the
// upstream pause: it sleeps until SIGINT/SIGTERM and, as PID 1 of a Pod sharing its process
// namespace, reaps zombies.
//
// The same binary is the harness's test image (tests/e2e/test_real_node_harness.py), so the
// harness is proven before any engine stub exists:
//
//	pause env             print the environment (downward API checks), exit 0
//	pause true            exit 0 (an exec probe)
//	pause serve ADDR      HTTP on ADDR: /healthz answers "ok", / answers the hostname
//	pause lookup NAME     resolve NAME with the Pod's /etc/resolv.conf (cluster DNS), print the addresses
//	pause get URL         GET URL, print the body; exit 1 on any failure or a non-2xx status
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		os.Exit(command(os.Args[1], os.Args[2:]))
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

func command(name string, args []string) int {
	switch {
	case name == "true":
		return 0
	case name == "env":
		env := os.Environ()
		sort.Strings(env)
		fmt.Println(strings.Join(env, "\n"))
		return 0
	case name == "serve" && len(args) == 1:
		host, _ := os.Hostname()
		http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, host) })
		srv := &http.Server{Addr: args[0], ReadHeaderTimeout: 5 * time.Second}
		go func() {
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			<-sigs
			os.Exit(0)
		}()
		fmt.Fprintln(os.Stderr, srv.ListenAndServe())
		return 1
	case name == "lookup" && len(args) == 1:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(strings.Join(addrs, "\n"))
		return 0
	case name == "get" && len(args) == 1:
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Get(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Print(string(body))
		if resp.StatusCode/100 != 2 {
			fmt.Fprintln(os.Stderr, resp.Status)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "pause: unknown command %q %q (env, true, serve ADDR, lookup NAME, get URL)\n", name, args)
	return 2
}
