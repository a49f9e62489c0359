// echo: a tiny HTTP server for the real-node tests, run from a FROM-scratch image.
//
//	GET  /      the pod's hostname (its name), so a Service's replies show which pod answered
//	GET  /self  JSON: the process's uid, gid, effective capabilities, no_new_privs, seccomp mode (from
//	            /proc/self/status) and the error of writing a file at / (a read-only root refuses it)
//	GET  /get?url=URL  the body of an HTTP GET of URL from inside the pod (502 saying why if it fails, answers
//	            other than 200, or is empty)
//	GET  /dial?addr=HOST:PORT  "ok" when a TCP connection to addr opens from inside the pod (502 if not)
//	POST /exit  answers, then exits with status 3 (the kubelet restarts the container)
//
// Listens on :$PORT (8080); exits 0 on SIGTERM/SIGINT.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		host, err := os.Hostname()
		if err != nil || host == "" {
			http.Error(w, fmt.Sprintf("no hostname (%q, %v)", host, err), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, host)
	})
	mux.HandleFunc("GET /self", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(self())
	})
	mux.HandleFunc("GET /get", func(w http.ResponseWriter, r *http.Request) {
		// A new connection per request: kube-proxy balances connections, not requests.
		client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		response, err := client.Get(r.URL.Query().Get("url"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer response.Body.Close()
		// The whole body first: a reply is the backend's complete 200 answer or a 502 saying what went wrong
		// (status, read error, empty body), never a 200 with what happened to arrive.
		body, err := io.ReadAll(response.Body)
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("reading the body (status %d, %d bytes): %v", response.StatusCode, len(body), err), http.StatusBadGateway)
		case response.StatusCode != http.StatusOK:
			http.Error(w, fmt.Sprintf("status %d: %q", response.StatusCode, body), http.StatusBadGateway)
		case len(body) == 0:
			http.Error(w, fmt.Sprintf("empty body (status %d, headers %v)", response.StatusCode, response.Header), http.StatusBadGateway)
		default:
			_, _ = w.Write(body)
		}
	})
	mux.HandleFunc("GET /dial", func(w http.ResponseWriter, r *http.Request) {
		conn, err := net.DialTimeout("tcp", r.URL.Query().Get("addr"), 5*time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn.Close()
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /exit", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "exiting")
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go func() { time.Sleep(100 * time.Millisecond); os.Exit(3) }()
	})
	server := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}()
	fmt.Fprintf(os.Stderr, "echo: listening on :%s as uid %d\n", port, os.Getuid())
	if err := server.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func self() map[string]string {
	result := map[string]string{"uid": fmt.Sprint(os.Getuid()), "gid": fmt.Sprint(os.Getgid())}
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		fields := map[string]string{"CapEff": "cap_eff", "NoNewPrivs": "no_new_privs", "Seccomp": "seccomp"}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			key, value, found := strings.Cut(scanner.Text(), ":")
			if name, ok := fields[key]; ok && found {
				result[name] = strings.TrimSpace(value)
			}
		}
	}
	result["write_root_error"] = ""
	if err := os.WriteFile("/probe", []byte("x"), 0o644); err != nil {
		result["write_root_error"] = err.Error()
	} else {
		_ = os.Remove("/probe")
	}
	return result
}
