// Mounts the developer panel on the console page (a file rather than inline script: the CSP allows no inline code).
import { mountDeveloperPanel } from "./profiler-table.js";

mountDeveloperPanel(document.getElementById("developer"), window.pib);
