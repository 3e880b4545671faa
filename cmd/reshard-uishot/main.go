// Command reshard-uishot takes a screenshot of a web page with headless
// Chromium after a fixed time of real rendering, through the DevTools
// protocol. Chromium's own --screenshot either waits for a virtual-time
// budget that a page that keeps polling (the Temporal UI's workflow pages)
// never lets expire, or, with --timeout, shoots a blank page.
//
//	reshard-uishot -url http://127.0.0.1:8233/namespaces/default/workflows -out list.png [-wait 8s]
//
// scripts/ui-screenshots.sh uses it for docs/img.
package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/net/websocket"
)

func main() {
	url := flag.String("url", "", "page to shoot")
	out := flag.String("out", "", "PNG file to write")
	wait := flag.Duration("wait", 8*time.Second, "time the page renders before the shot")
	width := flag.Int("width", 1600, "window width")
	height := flag.Int("height", 1000, "window height")
	chrome := flag.String("chromium", "chromium", "the Chromium binary")
	flag.Parse()
	if *url == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "reshard-uishot: give -url and -out")
		os.Exit(2)
	}
	if err := shoot(*chrome, *url, *out, *wait, *width, *height); err != nil {
		fmt.Fprintln(os.Stderr, "reshard-uishot:", err)
		os.Exit(1)
	}
}

func shoot(chrome, url, out string, wait time.Duration, w, h int) error {
	profile, err := os.MkdirTemp("", "reshard-uishot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	cmd := exec.Command(chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		fmt.Sprintf("--window-size=%d,%d", w, h), "--remote-debugging-port=0", "--remote-allow-origins=*", "--user-data-dir="+profile, url)
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	// Chromium writes its port to DevToolsActivePort once it listens.
	var port string
	for deadline := time.Now().Add(60 * time.Second); port == ""; {
		if b, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort")); err == nil {
			port = strings.SplitN(string(b), "\n", 2)[0]
		}
		if port == "" {
			if time.Now().After(deadline) {
				return errors.New("chromium did not open its DevTools port within 60s")
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(wait)
	resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
	if err != nil {
		return err
	}
	var targets []struct{ Type, WebSocketDebuggerURL string }
	err = json.NewDecoder(resp.Body).Decode(&targets)
	resp.Body.Close()
	if err != nil {
		return err
	}
	var ws string
	for _, t := range targets {
		if t.Type == "page" {
			ws = t.WebSocketDebuggerURL
		}
	}
	if ws == "" {
		return errors.New("no page target in chromium")
	}
	conn, err := websocket.Dial(ws, "", "http://127.0.0.1/")
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if err := websocket.JSON.Send(conn, map[string]any{"id": 1, "method": "Page.captureScreenshot", "params": map[string]any{"format": "png"}}); err != nil {
		return err
	}
	for {
		var msg struct {
			ID     int `json:"id"`
			Result struct {
				Data string `json:"data"`
			} `json:"result"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := websocket.JSON.Receive(conn, &msg); err != nil {
			return err
		}
		if msg.ID != 1 {
			continue // an event
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
		png, err := base64.StdEncoding.DecodeString(msg.Result.Data)
		if err != nil {
			return err
		}
		return os.WriteFile(out, png, 0o644)
	}
}
