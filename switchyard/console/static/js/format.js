// Number formats shared by the views.

export function fixed(value, digits = 1) {
  return value === null || value === undefined || Number.isNaN(value) ? "–" : value.toFixed(digits);
}

export function percent(share) {
  if (share === null || share === undefined) return "–";
  const value = share * 100;
  return `${value.toFixed(value > 0 && value < 1 ? 2 : 1)}%`;  // a big cache's first blocks still show
}

export function millis(seconds) {
  return seconds === null || seconds === undefined ? "–" : `${(seconds * 1000).toFixed(seconds < 0.1 ? 1 : 0)} ms`;
}

export function count(value) {
  return value === null || value === undefined ? "–" : Math.round(value).toLocaleString("en");
}

export function money(value) {
  return value === null || value === undefined ? "–" : value.toFixed(value < 1 ? 4 : 2);
}

export function element(tag, { className, text, attrs } = {}, children = []) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

// Replaces a table's rows; `empty` is said in one row when there are none.
export function fillTable(table, rows, empty = "Nothing yet.") {
  const body = table.tBodies[0];
  if (!rows.length) {
    // the note wraps within the screen's width, not the (wider, scrolling) table's
    const note = element("span", { text: empty });
    const cell = element("td", { className: "empty", attrs: { colspan: table.tHead.rows[0].cells.length } }, [note]);
    body.replaceChildren(element("tr", {}, [cell]));
    return;
  }
  body.replaceChildren(...rows.map((cells) => {
    const row = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      if (typeof cell === "object" && cell !== null) {
        td.textContent = cell.text;
        if (cell.className) td.className = cell.className;
      } else {
        td.textContent = cell;
      }
      row.append(td);
    }
    return row;
  }));
}
