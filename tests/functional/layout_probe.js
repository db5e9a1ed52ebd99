// Appended to a copy of a docs page by test_docs_in_chromium.py; reports, once the page has
// loaded: each code line that wraps ("wrapped") and those whose continuation rows do not start
// right of the line's indentation ("unindented"); each word of a name in a table cell
// ("Idempotency", "lease") that is cut over two rows ("broken"); each table wider than its
// column ("wide").
window.addEventListener("load", () => {
  // The rows a range is laid out on: [top, leftmost left] for each, top to bottom.
  const rows = (range) => {
    const byTop = new Map();
    for (const r of range.getClientRects()) {
      if (r.width === 0) continue;
      const top = Math.round(r.top);
      byTop.set(top, Math.min(byTop.get(top) ?? Infinity, r.left));
    }
    return [...byTop.entries()].sort((a, b) => a[0] - b[0]);
  };
  const unindented = [];
  let wrapped = 0;
  for (const line of document.querySelectorAll('pre > code > span[id^="__span-"]')) {
    const whole = document.createRange();
    whole.selectNodeContents(line);
    const lines = rows(whole);
    if (lines.length < 2) continue;
    wrapped++;
    // Where the indentation ends: the right edge of the line's leading spaces.
    let start = lines[0][1];
    const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const first = n.data.search(/\S/);
      if (first === 0) break;
      const spaces = document.createRange();
      spaces.setStart(n, 0);
      spaces.setEnd(n, first < 0 ? n.data.length : first);
      for (const r of spaces.getClientRects()) start = Math.max(start, r.right);
      if (first > 0) break;
    }
    if (lines.slice(1).some(([, left]) => left < start + 1)) {
      unindented.push(line.textContent.trim().slice(0, 50));
    }
  }
  const broken = [];
  for (const code of document.querySelectorAll("td code, th code")) {
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (const word of n.data.matchAll(/[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+/g)) {
        const range = document.createRange();
        range.setStart(n, word.index);
        range.setEnd(n, word.index + word[0].length);
        if (rows(range).length > 1) broken.push(word[0]);
      }
    }
  }
  const wide = [...document.querySelectorAll(".md-typeset__scrollwrap")]
    .filter((e) => e.scrollWidth > e.clientWidth + 1)
    .map((e) => e.textContent.trim().slice(0, 40));
  const report = document.createElement("div");
  report.id = "layout-report";
  report.textContent = JSON.stringify({ wrapped, unindented, broken, wide });
  document.body.appendChild(report);
});
