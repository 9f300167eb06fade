#!/usr/bin/env bash
# The localization catalogs (gettext MO files) of a fixed list of Debian packages, for `kind: gettext` sources:
#   scripts/get_catalogs.sh [OUT]          (default data/catalogs; needs apt-get and dpkg-deb, as root)
# lays them out as /usr/share/locale does: OUT/<locale>/LC_MESSAGES/<catalog>.mo, with OUT/packages.tsv naming
# each package's version and the sha256 of its .deb (what was fetched; `prepare` records every catalog's sha256
# in the dataset's manifest). Each catalog carries its package's licence (/usr/share/doc/<package>/copyright);
# fetched when needed, never committed. A folder of its own: one that holds other files is refused.
set -euo pipefail
OUT=${1:-data/catalogs}
# Desktop, office-like, media and developer tools of Debian 12, chosen for their many and long messages.
PACKAGES=(
    nautilus-data gedit-common evince-common gnome-control-center-data libgtk-3-common libglib2.0-data
    xfce4-session thunar-data gnome-text-editor gimp-data
    git gcc-12-locales
    evolution-common evolution-data-server-common gnucash-common gnumeric-common pidgin-data inkscape vlc-l10n
    anjuta-common geany-common brasero-common rhythmbox-data shotwell-common totem-common cheese-common eog
    epiphany-browser-data file-roller gnome-disk-utility gnome-shell-common gnome-software-common
    gnome-system-monitor gnome-terminal-data gthumb-data mousepad remmina-common seahorse simple-scan
    xfce4-panel xfce4-settings
)
if [ -d "$OUT" ] && [ ! -f "$OUT/packages.tsv" ] && [ -n "$(ls -A "$OUT")" ]; then
    echo "get_catalogs: $OUT holds files this script did not write (no packages.tsv); give another folder" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
[ -n "${SKIP_APT_UPDATE:-}" ] || apt-get update -qq
(cd "$work" && apt-get download -qq "${PACKAGES[@]}" 2>&1 | grep -v "couldn't be accessed by user '_apt'" || true)
: > "$OUT/packages.tsv.partial"
for deb in "$work"/*.deb; do
    name=$(dpkg-deb -f "$deb" Package)
    version=$(dpkg-deb -f "$deb" Version)
    dpkg-deb -x "$deb" "$work/root"
    printf '%s\t%s\t%s\n' "$name" "$version" "$(sha256sum "$deb" | cut -d' ' -f1)" >> "$OUT/packages.tsv.partial"
done
missing=$(comm -23 <(printf '%s\n' "${PACKAGES[@]}" | sort) <(cut -f1 "$OUT/packages.tsv.partial" | sort))
if [ -n "$missing" ]; then
    echo "get_catalogs: not downloaded: $missing (run apt-get update, or check the names)" >&2
    exit 1
fi
cp -r "$work/root/usr/share/locale/." "$OUT/"
mv "$OUT/packages.tsv.partial" "$OUT/packages.tsv"
echo "get_catalogs: $(find "$OUT" -name '*.mo' | wc -l) catalogs of ${#PACKAGES[@]} packages in $OUT"
