# style.gp — the look shared by every rehearse plot: a readable sans font,
# a light grid, a boxed legend, and a colour-blind-safe line palette.
set grid lc rgb "#d8d8d8" lw 1
set border lw 1.2
if (!exists("title_font")) { title_font = ",14" }
set title font title_font
set key top left box opaque noenhanced samplen 2 spacing 1.1
set tics nomirror
set datafile missing "nan"
set linetype 1 lc rgb "#0072b2" pt 7 ps 0.9
set linetype 2 lc rgb "#d55e00" pt 5 ps 0.9
set linetype 3 lc rgb "#009e73" pt 9 ps 1.0
set linetype 4 lc rgb "#cc79a7" pt 11 ps 1.0
set linetype 5 lc rgb "#e69f00" pt 13 ps 1.0
set linetype 6 lc rgb "#56b4e9" pt 3 ps 1.0
set linetype 7 lc rgb "#000000" pt 1 ps 1.0
set linetype 8 lc rgb "#999999" pt 2 ps 1.0
set linetype cycle 8
# Terminals: PNG for pages and people, SVG for papers.
png_term = 'set terminal pngcairo noenhanced size 1000,620 font "DejaVu Sans,11"'
svg_term = 'set terminal svg noenhanced size 1000,620 font "DejaVu Sans,11" dynamic background "#ffffff"'
