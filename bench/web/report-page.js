// The report page: renders a results JSON the user picks (a file rather than inline script: the CSP allows no inline code).
import { renderReport } from "./report-view.js";

document.getElementById("file").addEventListener("change", async (event) => {
  const results = JSON.parse(await event.target.files[0].text());
  renderReport(document.getElementById("report"), results);
});
